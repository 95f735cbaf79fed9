/*
 * Board description for the STM32H7B3LIH6Q on the STM32H7B3I-DK kit (zocodegen).
 *
 * Serial link: the STLINK-V3E virtual COM port, wired to USART1 with TX = PA9 and
 * RX = PA10 (UM2569 "Virtual COM port (VCP)" and the kit's I/O assignment), both alternate
 * function AF7 (STM32H7B3xI datasheet DS13139, "Port A alternate functions" table).
 * The build's --baud (FIRMWARE_BAUD in firmware.h, default 1,228,800), 8 data bits, no parity,
 * 1 stop bit, polled, no flow control.
 *
 * Supply: the kit powers the core from the MCU's internal SMPS step-down converter, with no
 * LDO and no external core supply: RM0455's "direct SMPS supply" configuration (PWR chapter,
 * system supply configurations; PWR_CR3). Board wiring per UM2569 (power supply section); the same
 * configuration is what ST's STM32CubeH7 projects for this kit program (direct SMPS supply)
 * and Zephyr's board description declares ("smps-direct"). PWR_CR3 takes one
 * supply configuration per power-on and a configuration the board is not wired for can cut
 * the core supply, so clock_init() writes it only from the reset state and only this one
 * value; if another value is already locked in, it keeps the 64 MHz reset clock.
 *
 * Clock: clock_init() runs the core at 280 MHz: VOS0, HSE 24 MHz crystal (UM2569 clock
 * sources; oscillator mode, HSEBYP = 0) -> PLL1 /12 = 2 MHz (PLL1RGE 2..4 MHz) x280 = 560 MHz
 * VCO (wide range, 128..560 MHz on the H7A3/B3) /2 = 280 MHz, 6 flash wait states with
 * WRHIGHFREQ = 11, CPU (CDCPRE /1) and AXI/AHB (HPRE /1) at 280 MHz, every APB (CDPPRE,
 * CDPPRE1, CDPPRE2, SRDPPRE /2) at 140 MHz (DS13139 maxima at VOS0: CPU 280, AXI/AHB 280,
 * APB 140 MHz). USART1's kernel clock is rcc_pclk2 (RCC_CDCCIP2R.USART16910SEL = 000), so
 * BRR = 140 MHz / 1,228,800 = 114. Every wait has a timeout; on a timeout clock_init() leaves
 * sys_ck on the 64 MHz HSI and says which step failed, and clock_measure() reads back what
 * actually runs, which is what the baud-rate divider, the DWT timeouts and
 * platform_cycles_per_second() use (zo_clocks in platform_stm32.c; `print zo_clocks`).
 *
 * Cycle counter: DWT CYCCNT (core clock cycles), unlocked through DWT_LAR as the
 * Cortex-M7 requires when no debugger has unlocked it.
 *
 * Caches: the Cortex-M7 L1 instruction and data caches are enabled (ZO_CACHES=0 at compile
 * time keeps them off). Safe here: nothing uses DMA, DTCM is never cached, peripherals are
 * Device memory in the default memory map, and the default attributes of flash and AXI SRAM
 * are write-back write-allocate.
 *
 * Register addresses: RM0455 (STM32H7A3/7B3/7B0 reference manual; chapters PWR, RCC and
 * FLASH, cited by register and section name) and the ARMv7-M Architecture Reference Manual
 * (DDI 0403E); bit positions agree with ST's register description of the STM32H7B3xxQ.
 */
#ifndef ZO_BOARD_STM32H7B3_H
#define ZO_BOARD_STM32H7B3_H

/* Included by platform_stm32.c (shared by both STM32 targets), after ZO_REG32, DWT_CYCCNT,
 * zo_wait_bits(), zo_ahb_divider(), zo_apb_divider() and struct zo_clocks. */

/* ---- clock plan (checked below with #error and by tests/test_stm32_targets.py) ---------- */

#define ZO_HSI_HZ      64000000u  /* RM0455 RCC "HSI oscillator": 64 MHz RC, HSIDIV /1 at reset */
#define ZO_CSI_HZ      4000000u   /* RM0455 RCC "CSI oscillator": 4 MHz RC */
#define ZO_HSE_HZ      24000000u  /* UM2569 clock sources: 24 MHz crystal on PH0/PH1 */
#define ZO_PLL1_M      12u        /* RCC_PLLCKSELR DIVM1: 1..63 */
#define ZO_PLL1_N      280u       /* RCC_PLL1DIVR DIVN1: 8..420 on the H7A3/B3 */
#define ZO_PLL1_P      2u         /* RCC_PLL1DIVR DIVP1: 1..128 */
#define ZO_PLL1_RGE    1u         /* RCC_PLLCFGR PLL1RGE: 01 = input 2..4 MHz */
#define ZO_PLL1_VCOSEL 0u         /* RCC_PLLCFGR PLL1VCOSEL: 0 = wide VCO (input >= 2 MHz) */
#define ZO_CDCPRE_DIV  1u         /* RCC_CDCFGR1 CDCPRE: CPU = sys_ck / 1 */
#define ZO_HPRE_DIV    1u         /* RCC_CDCFGR1 HPRE: rcc_hclk (AXI, AHB) = CPU / 1 */
#define ZO_APB_DIV     2u         /* CDPPRE, CDPPRE1, CDPPRE2, SRDPPRE: APB3, APB1, APB2, APB4 */
/* RM0455 FLASH chapter, table "FLASH recommended number of wait states and programming
 * delay" (table 16 in rev 10), VOS0: one more wait state per 42 MHz of the AXI clock
 * (rcc_aclk = rcc_hclk), WRHIGHFREQ = wait states / 2; 252 < f <= 280 MHz: 6 and 11. */
#define ZO_FLASH_WS          6u
#define ZO_FLASH_WRHIGHFREQ  3u

#define ZO_PLL1_REF_HZ    (ZO_HSE_HZ / ZO_PLL1_M)         /* 2 MHz */
#define ZO_PLL1_VCO_HZ    (ZO_PLL1_REF_HZ * ZO_PLL1_N)    /* 560 MHz */
#define ZO_SYSCLK_HZ      (ZO_PLL1_VCO_HZ / ZO_PLL1_P)    /* sys_ck 280 MHz */
/* The Cortex-M7 runs on sys_ck / CDCPRE (RM0455 RCC "System and bus clocks"): what DWT
 * CYCCNT counts. Nominal values; at run time platform_stm32.c uses zo_clocks. */
#define ZO_CORE_HZ        (ZO_SYSCLK_HZ / ZO_CDCPRE_DIV)  /* 280 MHz */
#define ZO_HCLK_HZ        (ZO_CORE_HZ / ZO_HPRE_DIV)      /* 280 MHz: AXI clock, flash clock */
#define ZO_PCLK2_HZ       (ZO_HCLK_HZ / ZO_APB_DIV)       /* 140 MHz: USART1's kernel clock */

#if ZO_HSE_HZ % ZO_PLL1_M != 0 || ZO_PLL1_REF_HZ < 2000000u || ZO_PLL1_REF_HZ > 4000000u \
    || ZO_PLL1_RGE != 1u
#error "PLL1 reference must be 2..4 MHz, PLL1RGE = 01 (RM0455 RCC_PLLCFGR PLL1RGE)"
#endif
#if ZO_PLL1_VCOSEL != 0u || ZO_PLL1_N < 8u || ZO_PLL1_N > 420u \
    || ZO_PLL1_VCO_HZ < 128000000u || ZO_PLL1_VCO_HZ > 560000000u
#error "wide-range VCO must be 128..560 MHz with DIVN1 8..420 (RM0455 RCC PLL1)"
#endif
#if ZO_CORE_HZ > 280000000u || ZO_HCLK_HZ > 280000000u || ZO_PCLK2_HZ > 140000000u
#error "a clock is above its maximum at VOS0 (DS13139: CPU 280, AXI/AHB 280, APB 140 MHz)"
#endif
#if ZO_FLASH_WS != (ZO_HCLK_HZ + 41999999u) / 42000000u - 1u \
    || ZO_FLASH_WRHIGHFREQ != ZO_FLASH_WS / 2u
#error "flash timing does not match the AXI clock (RM0455 FLASH wait-state table, VOS0)"
#endif

#define ZO_BOARD_NAME "stm32h7b3" /* platform_name(): the target name of zocodegen build */

/* ---- PWR: RM0455 PWR chapter "PWR registers", base 0x58024800 (memory map, section 2.3) -- */

#define PWR_BASE      0x58024800u
#define PWR_CSR1      ZO_REG32(PWR_BASE + 0x04u) /* PWR control status register 1 */
#define PWR_CR3       ZO_REG32(PWR_BASE + 0x0Cu) /* PWR control register 3: supply config */
#define PWR_SRDCR     ZO_REG32(PWR_BASE + 0x18u) /* PWR SmartRun domain control register */
#define PWR_CSR1_ACTVOSRDY  (1u << 13) /* the supply/VOS level in use is ready */
#define PWR_CR3_BYPASS      (1u << 0)  /* 1: core supplied externally, regulators off */
#define PWR_CR3_LDOEN       (1u << 1)  /* LDO enable */
#define PWR_CR3_SMPSEN      (1u << 2)  /* SMPS step-down converter enable */
#define PWR_CR3_SMPSEXTHP   (1u << 3)  /* SMPS forced on for external loads, high power */
#define PWR_CR3_SMPSLEVEL   (3u << 4)  /* SMPS output level when it supplies the LDO/external */
/* The supply-configuration fields, their reset value (SMPS + LDO, "not configured yet") and
 * the kit's value: direct SMPS supply = SMPSEN only, LDO off, no bypass, SMPSEXTHP and
 * SMPSLEVEL 0 (RM0455 PWR, supply configurations; PWR_CR3). */
#define PWR_CR3_SUPPLY      (PWR_CR3_SMPSLEVEL | PWR_CR3_SMPSEXTHP | PWR_CR3_SMPSEN \
                             | PWR_CR3_LDOEN | PWR_CR3_BYPASS)
#define PWR_CR3_SUPPLY_RESET  (PWR_CR3_SMPSEN | PWR_CR3_LDOEN)
#define PWR_CR3_DIRECT_SMPS   PWR_CR3_SMPSEN
#define PWR_SRDCR_VOS       (3u << 14) /* bits 15:14: 11 = VOS0, 10 = VOS1, 01 = VOS2, 00 = VOS3 */
#define PWR_SRDCR_VOS0      (3u << 14)
#define PWR_SRDCR_VOSRDY    (1u << 13)

/* ---- RCC: RM0455 RCC chapter "RCC register description", base 0x58024400 (section 2.3) -- */

#define RCC_BASE      0x58024400u
#define RCC_CR        ZO_REG32(RCC_BASE + 0x000u) /* source control */
#define RCC_CFGR      ZO_REG32(RCC_BASE + 0x010u) /* clock configuration */
#define RCC_CDCFGR1   ZO_REG32(RCC_BASE + 0x018u) /* CPU domain clock configuration 1 */
#define RCC_CDCFGR2   ZO_REG32(RCC_BASE + 0x01Cu) /* CPU domain clock configuration 2 */
#define RCC_SRDCFGR   ZO_REG32(RCC_BASE + 0x020u) /* SmartRun domain clock configuration */
#define RCC_PLLCKSELR ZO_REG32(RCC_BASE + 0x028u) /* PLLs clock source selection */
#define RCC_PLLCFGR   ZO_REG32(RCC_BASE + 0x02Cu) /* PLLs configuration */
#define RCC_PLL1DIVR  ZO_REG32(RCC_BASE + 0x030u) /* PLL1 dividers configuration */
#define RCC_PLL1FRACR ZO_REG32(RCC_BASE + 0x034u) /* PLL1 fractional divider */
#define RCC_CDCCIP2R  ZO_REG32(RCC_BASE + 0x054u) /* CD domain kernel clock config 2 */
#define RCC_AHB4ENR   ZO_REG32(RCC_BASE + 0x0E0u) /* AHB4 (SRD) peripheral clock enable */
#define RCC_APB2ENR   ZO_REG32(RCC_BASE + 0x0F0u) /* APB2 peripheral clock enable */

#define RCC_CR_HSIDIV_POS     3u          /* bits 4:3: HSI /1, /2, /4, /8 */
#define RCC_CR_HSEON          (1u << 16)
#define RCC_CR_HSERDY         (1u << 17)
#define RCC_CR_HSEBYP         (1u << 18)  /* 0: crystal between OSC_IN and OSC_OUT */
#define RCC_CR_PLL1ON         (1u << 24)
#define RCC_CR_PLL1RDY        (1u << 25)

#define RCC_CFGR_SW           (7u << 0)   /* bits 2:0: 000 HSI, 001 CSI, 010 HSE, 011 PLL1 */
#define RCC_CFGR_SW_PLL1      (3u << 0)
#define RCC_CFGR_SWS_POS      3u          /* bits 5:3: switch status, same codes */
#define RCC_CFGR_SWS          (7u << RCC_CFGR_SWS_POS)

#define RCC_CDCFGR1_HPRE_POS   0u         /* bits 3:0, AHB-style encoding */
#define RCC_CDCFGR1_CDPPRE_POS 4u         /* bits 6:4, APB-style encoding (APB3) */
#define RCC_CDCFGR1_CDCPRE_POS 8u         /* bits 11:8, AHB-style encoding (CPU) */
#define RCC_CDCFGR2_CDPPRE1_POS 4u        /* bits 6:4 (APB1) */
#define RCC_CDCFGR2_CDPPRE2_POS 8u        /* bits 10:8 (APB2) */
#define RCC_SRDCFGR_SRDPPRE_POS 4u        /* bits 6:4 (APB4) */
#define RCC_APB_DIV2          0x4u        /* 100 */

#define RCC_PLLCKSELR_PLLSRC   (3u << 0)  /* bits 1:0: 00 HSI, 01 CSI, 10 HSE, 11 none */
#define RCC_PLLCKSELR_PLLSRC_HSE (2u << 0)
#define RCC_PLLCKSELR_DIVM1_POS 4u        /* bits 9:4: 0 = PLL1 input off, 1..63 */
#define RCC_PLLCKSELR_DIVM1    (0x3Fu << RCC_PLLCKSELR_DIVM1_POS)

#define RCC_PLLCFGR_PLL1FRACEN (1u << 0)
#define RCC_PLLCFGR_PLL1VCOSEL (1u << 1)  /* 0: wide VCO, 1: medium VCO (150..420 MHz) */
#define RCC_PLLCFGR_PLL1RGE_POS 2u        /* bits 3:2: 00 1..2, 01 2..4, 10 4..8, 11 8..16 MHz */
#define RCC_PLLCFGR_PLL1RGE    (3u << RCC_PLLCFGR_PLL1RGE_POS)
#define RCC_PLLCFGR_DIVP1EN    (1u << 16)

#define RCC_PLL1DIVR_N1_POS    0u         /* bits 8:0: DIVN1 - 1 */
#define RCC_PLL1DIVR_N1        (0x1FFu << RCC_PLL1DIVR_N1_POS)
#define RCC_PLL1DIVR_P1_POS    9u         /* bits 15:9: DIVP1 - 1 */
#define RCC_PLL1DIVR_P1        (0x7Fu << RCC_PLL1DIVR_P1_POS)
#define RCC_PLL1FRACR_FRACN1_POS 3u       /* bits 15:3 */

#define RCC_AHB4ENR_GPIOAEN     (1u << 0)
#define RCC_APB2ENR_USART1EN    (1u << 4)
#define RCC_CDCCIP2R_USART16910SEL (7u << 3) /* 000: rcc_pclk2 (reset value) */

/* ---- FLASH: RM0455 FLASH chapter "FLASH registers", base 0x52002000 (section 2.3) ------- */

#define FLASH_BASE    0x52002000u
#define FLASH_ACR     ZO_REG32(FLASH_BASE + 0x000u) /* FLASH access control register */
#define FLASH_ACR_LATENCY_POS    0u       /* bits 3:0: read wait states */
#define FLASH_ACR_WRHIGHFREQ_POS 4u       /* bits 5:4: programming delay */
#define FLASH_ACR_TIMING        ((0xFu << FLASH_ACR_LATENCY_POS) \
                                 | (3u << FLASH_ACR_WRHIGHFREQ_POS))
#define FLASH_ACR_TARGET        ((ZO_FLASH_WS << FLASH_ACR_LATENCY_POS) \
                                 | (ZO_FLASH_WRHIGHFREQ << FLASH_ACR_WRHIGHFREQ_POS))

/* ---- GPIO: RM0455 GPIO chapter "GPIO registers"; GPIOA base 0x58020000 (section 2.3) ---- */

#define GPIOA_BASE    0x58020000u

#define VCP_TX_PORT   GPIOA_BASE
#define VCP_TX_PIN    9u
#define VCP_RX_PORT   GPIOA_BASE
#define VCP_RX_PIN    10u
#define VCP_AF        7u   /* AF7 = USART1 on PA9 and PA10 (DS13139) */

/* ---- USART1: RM0455 USART chapter, "USART registers"; base 0x40011000 (section 2.3) ---- */

#define ZO_VCP_USART_BASE 0x40011000u /* USART1 */
#define ZO_USART_HAS_PRESC 1          /* RM0455: kernel clock prescaler at +0x2C */

/* ---- supply and clock tree -------------------------------------------------------------- */

/* Timeouts, in milliseconds of the 64 MHz HSI that runs while clock_init() waits. Generous:
 * the crystal starts in a few ms and PLL1 locks in well under 1 ms (DS13139 HSE and PLL
 * characteristics); ST's own drivers allow 100 ms for HSERDY, 2 ms for PLL1RDY and 1 s for
 * the supply and VOS flags. */
#define ZO_HSE_TIMEOUT_MS       100u
#define ZO_PLL_TIMEOUT_MS       10u
#define ZO_SUPPLY_TIMEOUT_MS    100u
#define ZO_SWITCH_TIMEOUT_MS    10u
#define ZO_TIMEOUT(ms)          ZO_MS_TO_CYCLES(ms, ZO_HSI_HZ)

/* What clock_init() changes in the RCC and the flash interface, as found on entry. */
struct clock_entry {
    uint32_t cdcfgr1, cdcfgr2, srdcfgr, flash_timing;
};

/* Back to the clock found on entry (sys_ck = HSI, which clock_init() never leaves before its
 * last step): PLL1 and HSE off, the bus prescalers and the flash timing found on entry (fewer
 * wait states are fine once the clock is low again). The supply configuration and VOS0, once
 * in force, stay: both are valid at any frequency. */
static void clock_undo(const struct clock_entry *entry)
{
    RCC_CR &= ~RCC_CR_PLL1ON;
    RCC_CR &= ~RCC_CR_HSEON;
    RCC_CDCFGR1 = entry->cdcfgr1;
    RCC_CDCFGR2 = entry->cdcfgr2;
    RCC_SRDCFGR = entry->srdcfgr;
    FLASH_ACR = (FLASH_ACR & ~FLASH_ACR_TIMING) | entry->flash_timing;
    (void)FLASH_ACR;
}

/*
 * sys_ck 280 MHz from PLL1 fed by the HSE crystal, in the order RM0455 requires: supply
 * configuration (PWR chapter, supply configurations; wait ACTVOSRDY), VOS0 (PWR, voltage
 * scaling; wait VOSRDY), HSE (wait HSERDY), PLL1 (RCC, PLLs: configured while off; wait
 * PLL1RDY), flash wait states before the frequency rises (FLASH chapter, read latency;
 * checked by reading FLASH_ACR back), bus prescalers, then the switch (wait SWS).
 * Returns ZO_CLOCK_OK or the step that did not complete (enum zo_clock_status); then sys_ck
 * is still the 64 MHz HSI.
 */
static enum zo_clock_status clock_init(void)
{
    const struct clock_entry entry = {RCC_CDCFGR1, RCC_CDCFGR2, RCC_SRDCFGR,
                                      FLASH_ACR & FLASH_ACR_TIMING};

    /* Only from the reset state: sys_ck = HSI. Anything else (a core-only reset under a
     * debugger, a bootloader that already set clocks) is kept and measured as it is. */
    if ((RCC_CFGR & RCC_CFGR_SWS) != 0u) {
        return ZO_CLOCK_NOT_FROM_RESET;
    }

    /* Supply configuration: PWR_CR3 accepts one write per power-on. Still the reset value
     * (SMPS + LDO): write direct SMPS. Already written (by an earlier run of this firmware
     * after a system reset, or by other firmware since power-on): go on only if it is direct
     * SMPS; any other value is locked until power-off, and VOS0 is not attempted on it. */
    uint32_t cr3 = PWR_CR3;
    if ((cr3 & (PWR_CR3_SMPSEN | PWR_CR3_LDOEN | PWR_CR3_BYPASS)) == PWR_CR3_SUPPLY_RESET) {
        PWR_CR3 = (cr3 & ~PWR_CR3_SUPPLY) | PWR_CR3_DIRECT_SMPS;
    } else if ((cr3 & PWR_CR3_SUPPLY) != PWR_CR3_DIRECT_SMPS) {
        return ZO_CLOCK_FAIL_SUPPLY;
    }
    if (!zo_wait_bits(&PWR_CSR1, PWR_CSR1_ACTVOSRDY, PWR_CSR1_ACTVOSRDY,
                      ZO_TIMEOUT(ZO_SUPPLY_TIMEOUT_MS))) {
        return ZO_CLOCK_FAIL_SUPPLY;
    }

    /* VOS0, required above 225 MHz (RM0455 PWR, voltage scaling; PWR_SRDCR VOS = 11). */
    PWR_SRDCR = (PWR_SRDCR & ~PWR_SRDCR_VOS) | PWR_SRDCR_VOS0;
    (void)PWR_SRDCR;
    if (!zo_wait_bits(&PWR_SRDCR, PWR_SRDCR_VOSRDY, PWR_SRDCR_VOSRDY,
                      ZO_TIMEOUT(ZO_SUPPLY_TIMEOUT_MS))) {
        return ZO_CLOCK_FAIL_VOLTAGE;
    }

    /* HSE: the kit's 24 MHz crystal, so oscillator mode, not bypass (RM0455 RCC, HSE
     * oscillator; RCC_CR HSEON, HSERDY, HSEBYP). */
    RCC_CR &= ~RCC_CR_HSEBYP;
    RCC_CR |= RCC_CR_HSEON;
    if (!zo_wait_bits(&RCC_CR, RCC_CR_HSERDY, RCC_CR_HSERDY, ZO_TIMEOUT(ZO_HSE_TIMEOUT_MS))) {
        clock_undo(&entry);
        return ZO_CLOCK_FAIL_HSE;
    }

    /* PLL1, configured while it is off (off at reset): HSE / 12 = 2 MHz reference, range
     * 2..4 MHz, wide VCO x280 = 560 MHz, integer mode, P output /2 = 280 MHz enabled; the Q
     * and R dividers keep their reset values (/2) and drive nothing. */
    RCC_CR &= ~RCC_CR_PLL1ON;
    if (!zo_wait_bits(&RCC_CR, RCC_CR_PLL1RDY, 0u, ZO_TIMEOUT(ZO_PLL_TIMEOUT_MS))) {
        clock_undo(&entry);
        return ZO_CLOCK_FAIL_PLL;
    }
    RCC_PLLCKSELR = (RCC_PLLCKSELR & ~(RCC_PLLCKSELR_PLLSRC | RCC_PLLCKSELR_DIVM1))
                    | RCC_PLLCKSELR_PLLSRC_HSE | (ZO_PLL1_M << RCC_PLLCKSELR_DIVM1_POS);
    RCC_PLLCFGR = (RCC_PLLCFGR & ~(RCC_PLLCFGR_PLL1FRACEN | RCC_PLLCFGR_PLL1VCOSEL
                                   | RCC_PLLCFGR_PLL1RGE))
                  | (ZO_PLL1_RGE << RCC_PLLCFGR_PLL1RGE_POS)
                  | (ZO_PLL1_VCOSEL != 0u ? RCC_PLLCFGR_PLL1VCOSEL : 0u)
                  | RCC_PLLCFGR_DIVP1EN;
    RCC_PLL1DIVR = (RCC_PLL1DIVR & ~(RCC_PLL1DIVR_N1 | RCC_PLL1DIVR_P1))
                   | ((ZO_PLL1_N - 1u) << RCC_PLL1DIVR_N1_POS)
                   | ((ZO_PLL1_P - 1u) << RCC_PLL1DIVR_P1_POS);
    RCC_PLL1FRACR = 0u;
    RCC_CR |= RCC_CR_PLL1ON;
    if (!zo_wait_bits(&RCC_CR, RCC_CR_PLL1RDY, RCC_CR_PLL1RDY,
                      ZO_TIMEOUT(ZO_PLL_TIMEOUT_MS))) {
        clock_undo(&entry);
        return ZO_CLOCK_FAIL_PLL;
    }

    /* Flash wait states and programming delay for 280 MHz at VOS0 BEFORE the clock goes up,
     * read back to be sure they are in force. */
    FLASH_ACR = (FLASH_ACR & ~FLASH_ACR_TIMING) | FLASH_ACR_TARGET;
    if ((FLASH_ACR & FLASH_ACR_TIMING) != FLASH_ACR_TARGET) {
        clock_undo(&entry);
        return ZO_CLOCK_FAIL_FLASH;
    }

    /* Prescalers while still on HSI (APBs at 32 MHz until the switch): CPU /1, AXI/AHB /1,
     * APB3 /2 (RCC_CDCFGR1); APB1 /2, APB2 /2 (RCC_CDCFGR2); APB4 /2 (RCC_SRDCFGR). */
    RCC_CDCFGR1 = (RCC_CDCFGR1 & ~((0xFu << RCC_CDCFGR1_CDCPRE_POS)
                                   | (7u << RCC_CDCFGR1_CDPPRE_POS)
                                   | (0xFu << RCC_CDCFGR1_HPRE_POS)))
                  | (RCC_APB_DIV2 << RCC_CDCFGR1_CDPPRE_POS); /* CDCPRE, HPRE = 0000: /1 */
    RCC_CDCFGR2 = (RCC_CDCFGR2 & ~((7u << RCC_CDCFGR2_CDPPRE1_POS)
                                   | (7u << RCC_CDCFGR2_CDPPRE2_POS)))
                  | (RCC_APB_DIV2 << RCC_CDCFGR2_CDPPRE1_POS)
                  | (RCC_APB_DIV2 << RCC_CDCFGR2_CDPPRE2_POS);
    RCC_SRDCFGR = (RCC_SRDCFGR & ~(7u << RCC_SRDCFGR_SRDPPRE_POS))
                  | (RCC_APB_DIV2 << RCC_SRDCFGR_SRDPPRE_POS);

    /* Switch sys_ck to PLL1 and wait until SWS says it happened (RCC_CFGR). */
    RCC_CFGR = (RCC_CFGR & ~RCC_CFGR_SW) | RCC_CFGR_SW_PLL1;
    if (!zo_wait_bits(&RCC_CFGR, RCC_CFGR_SWS, RCC_CFGR_SW_PLL1 << RCC_CFGR_SWS_POS,
                      ZO_TIMEOUT(ZO_SWITCH_TIMEOUT_MS))) {
        RCC_CFGR &= ~RCC_CFGR_SW; /* back to HSI */
        if (zo_wait_bits(&RCC_CFGR, RCC_CFGR_SWS, 0u, ZO_TIMEOUT(ZO_SWITCH_TIMEOUT_MS))) {
            clock_undo(&entry);
        }
        return ZO_CLOCK_FAIL_SWITCH;
    }
    return ZO_CLOCK_OK;
}

/* What runs now, from the RCC registers (RM0455 RCC clock tree): sys_ck from SWS (and the
 * PLL1 fields when it is PLL1), CPU = sys_ck / CDCPRE, rcc_hclk = CPU / HPRE, rcc_pclk2 =
 * rcc_hclk / CDPPRE2 = USART1's kernel clock. */
static void clock_measure(struct zo_clocks *clocks)
{
    uint32_t hsi = ZO_HSI_HZ >> ((RCC_CR >> RCC_CR_HSIDIV_POS) & 3u);
    uint32_t sysclk = hsi;
    switch ((RCC_CFGR & RCC_CFGR_SWS) >> RCC_CFGR_SWS_POS) {
    case 1u:
        sysclk = ZO_CSI_HZ;
        break;
    case 2u:
        sysclk = ZO_HSE_HZ;
        break;
    case 3u: {
        uint32_t cksel = RCC_PLLCKSELR;
        uint32_t divr = RCC_PLL1DIVR;
        static const uint32_t source[4] = {0u, ZO_CSI_HZ, ZO_HSE_HZ, 0u};
        uint32_t in = (cksel & RCC_PLLCKSELR_PLLSRC) == 0u ? hsi : source[cksel & 3u];
        uint32_t m = (cksel & RCC_PLLCKSELR_DIVM1) >> RCC_PLLCKSELR_DIVM1_POS;
        uint32_t n = ((divr & RCC_PLL1DIVR_N1) >> RCC_PLL1DIVR_N1_POS) + 1u;
        uint64_t n8192 = (uint64_t)n << 13; /* N + FRACN1 / 2^13 */
        uint32_t p = ((divr & RCC_PLL1DIVR_P1) >> RCC_PLL1DIVR_P1_POS) + 1u;
        if ((RCC_PLLCFGR & RCC_PLLCFGR_PLL1FRACEN) != 0u) {
            n8192 += (RCC_PLL1FRACR >> RCC_PLL1FRACR_FRACN1_POS) & 0x1FFFu;
        }
        sysclk = m != 0u ? (uint32_t)((uint64_t)in * n8192 / m / p >> 13) : 0u;
        break;
    }
    default:
        break;
    }
    uint32_t cd1 = RCC_CDCFGR1;
    clocks->sysclk_hz = sysclk;
    clocks->core_hz = sysclk / zo_ahb_divider((cd1 >> RCC_CDCFGR1_CDCPRE_POS) & 0xFu);
    clocks->usart_hz = clocks->core_hz / zo_ahb_divider((cd1 >> RCC_CDCFGR1_HPRE_POS) & 0xFu)
                       / zo_apb_divider((RCC_CDCFGR2 >> RCC_CDCFGR2_CDPPRE2_POS) & 7u);
    if (clocks->core_hz == 0u) { /* PLL1 without an input: not a state this file ever sets */
        clocks->core_hz = ZO_HSI_HZ;
    }
}

/* Clocks of the VCP pins' GPIO ports and of USART1, USART1's kernel clock = PCLK2. */
static void board_serial_clocks(void)
{
    RCC_AHB4ENR |= RCC_AHB4ENR_GPIOAEN;
    RCC_APB2ENR |= RCC_APB2ENR_USART1EN;
    (void)RCC_APB2ENR; /* read back: the clock is running before the first access */
    zo_dsb_isb();
    RCC_CDCCIP2R &= ~RCC_CDCCIP2R_USART16910SEL; /* kernel clock = rcc_pclk2 (reset value) */
}

#endif /* ZO_BOARD_STM32H7B3_H */
