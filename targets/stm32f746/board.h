/*
 * Board description for the STM32F746NG on the 32F746GDISCOVERY kit (zocodegen).
 *
 * Serial link: the ST-LINK/V2-1 virtual COM port, wired to USART1 with TX = PA9 and
 * RX = PB7 (UM1907 "USB virtual COM port" and the I/O assignment table), both alternate
 * function AF7 (STM32F746xx datasheet DS10916, table 12 "Alternate function mapping").
 * The build's --baud (FIRMWARE_BAUD in firmware.h, default 1,228,800), 8 data bits, no parity,
 * 1 stop bit, polled, no flow control.
 *
 * Clock: clock_init() runs the core at 216 MHz: HSE 25 MHz crystal (UM1907 clock sources;
 * oscillator mode, HSEBYP = 0, as ST's STM32CubeF7 projects for this kit start it) -> PLL
 * /25 x432 /2, voltage scale 1
 * with over-drive (needed above 180 MHz), 7 flash wait states, AHB /1 = 216 MHz, APB1 /4 =
 * 54 MHz, APB2 /2 = 108 MHz (the datasheet maxima: 216, 54, 108 MHz). USART1's kernel clock
 * is PCLK2 (RCC_DCKCFGR2.USART1SEL = 00), so BRR = 108 MHz / 1,228,800 = 88. Every wait has a
 * timeout; on a timeout clock_init() leaves SYSCLK on the 16 MHz HSI and says which step
 * failed, and clock_measure() reads back what actually runs, which is what the baud-rate
 * divider, the DWT timeouts and platform_cycles_per_second() use (zo_clocks in
 * platform_stm32.c; `print zo_clocks` in a debugger).
 *
 * Cycle counter: DWT CYCCNT (core clock cycles), unlocked through DWT_LAR as the
 * Cortex-M7 requires when no debugger has unlocked it.
 *
 * Caches: the Cortex-M7 L1 instruction and data caches are enabled (ZO_CACHES=0 at compile
 * time keeps them off). Safe here: nothing uses DMA, DTCM is never cached, peripherals are
 * Device memory in the default memory map, and the default attributes of flash and SRAM1/2
 * are write-back write-allocate (no write-through erratum exposure). Code runs from the AXIM
 * alias of flash (0x08000000), which the L1 instruction cache serves; the ART accelerator and
 * its prefetch (FLASH_ACR ARTEN/PRFTEN) serve only the ITCM alias (0x00200000; AN4667
 * "STM32F7 Series system architecture and performance", flash interfaces), so they stay off.
 *
 * Register addresses: RM0385 rev 8 (STM32F75xxx/74xxx reference manual) and the ARMv7-M
 * Architecture Reference Manual (DDI 0403E); the section of each is next to its #define.
 */
#ifndef ZO_BOARD_STM32F746_H
#define ZO_BOARD_STM32F746_H

/* Included by platform_stm32.c (shared by both STM32 targets), after ZO_REG32, DWT_CYCCNT,
 * zo_wait_bits(), zo_ahb_divider(), zo_apb_divider() and struct zo_clocks. */

/* ---- clock plan (checked below with #error and by tests/test_stm32_targets.py) ---------- */

#define ZO_HSI_HZ      16000000u  /* RM0385 5.2.2 "HSI clock": 16 MHz RC, SYSCLK at reset */
#define ZO_HSE_HZ      25000000u  /* UM1907 clock sources: 25 MHz crystal on PH0/PH1 */
#define ZO_PLL_M       25u        /* RM0385 5.3.2 RCC_PLLCFGR PLLM: 2..63, VCO in 1..2 MHz */
#define ZO_PLL_N       432u       /* PLLN: 50..432, VCO out 100..432 MHz */
#define ZO_PLL_P       2u         /* PLLP: 2, 4, 6 or 8; SYSCLK <= 216 MHz */
#define ZO_PLL_Q       9u         /* PLLQ: 2..15; 48 MHz domain (USB/SDMMC/RNG), <= 48 MHz */
#define ZO_AHB_DIV     1u         /* HPRE */
#define ZO_APB1_DIV    4u         /* PPRE1: PCLK1 <= 54 MHz (DS10916 operating conditions) */
#define ZO_APB2_DIV    2u         /* PPRE2: PCLK2 <= 108 MHz (ibid.) */
#define ZO_FLASH_WS    7u         /* RM0385 3.3.2 table 5: 210 < HCLK <= 216 MHz at 2.7-3.6 V */

#define ZO_PLL_VCO_IN_HZ  (ZO_HSE_HZ / ZO_PLL_M)          /* 1 MHz */
#define ZO_PLL_VCO_HZ     (ZO_PLL_VCO_IN_HZ * ZO_PLL_N)   /* 432 MHz */
#define ZO_PLL48_HZ       (ZO_PLL_VCO_HZ / ZO_PLL_Q)      /* 48 MHz */
#define ZO_SYSCLK_HZ      (ZO_PLL_VCO_HZ / ZO_PLL_P)      /* 216 MHz */
/* The Cortex-M7 runs on HCLK = SYSCLK / HPRE (RM0385 5.2, figure 13 "Clock tree"): what DWT
 * CYCCNT counts. Nominal values; at run time platform_stm32.c uses zo_clocks. */
#define ZO_CORE_HZ        (ZO_SYSCLK_HZ / ZO_AHB_DIV)     /* 216 MHz */
#define ZO_PCLK1_HZ       (ZO_CORE_HZ / ZO_APB1_DIV)      /* 54 MHz */
#define ZO_PCLK2_HZ       (ZO_CORE_HZ / ZO_APB2_DIV)      /* 108 MHz: USART1's kernel clock */

#if ZO_HSE_HZ % ZO_PLL_M != 0 || ZO_PLL_VCO_IN_HZ < 1000000u || ZO_PLL_VCO_IN_HZ > 2000000u
#error "PLL input (HSE / PLLM) must be 1..2 MHz (RM0385 5.3.2, PLLM)"
#endif
#if ZO_PLL_N < 50u || ZO_PLL_N > 432u || ZO_PLL_VCO_HZ < 100000000u || ZO_PLL_VCO_HZ > 432000000u
#error "VCO output must be 100..432 MHz with PLLN 50..432 (RM0385 5.3.2, PLLN)"
#endif
#if ZO_SYSCLK_HZ > 216000000u || ZO_PLL48_HZ > 48000000u || ZO_PCLK1_HZ > 54000000u \
    || ZO_PCLK2_HZ > 108000000u
#error "a clock is above its maximum (DS10916: SYSCLK 216, PCLK1 54, PCLK2 108 MHz; 48 MHz)"
#endif
#if ZO_FLASH_WS != (ZO_CORE_HZ + 29999999u) / 30000000u - 1u
#error "flash latency does not match HCLK (RM0385 3.3.2 table 5: 30 MHz per wait state, 2.7-3.6 V)"
#endif

#define ZO_BOARD_NAME "stm32f746" /* platform_name(): the target name of zocodegen build */

/* ---- RCC: RM0385 section 5.3, base 0x40023800 (section 2.2.2, table 1) ------------------ */

#define RCC_BASE      0x40023800u
#define RCC_CR        ZO_REG32(RCC_BASE + 0x00u) /* 5.3.1 clock control */
#define RCC_PLLCFGR   ZO_REG32(RCC_BASE + 0x04u) /* 5.3.2 PLL configuration */
#define RCC_CFGR      ZO_REG32(RCC_BASE + 0x08u) /* 5.3.3 clock configuration */
#define RCC_AHB1ENR   ZO_REG32(RCC_BASE + 0x30u) /* 5.3.10 */
#define RCC_APB1ENR   ZO_REG32(RCC_BASE + 0x40u) /* 5.3.13 */
#define RCC_APB2ENR   ZO_REG32(RCC_BASE + 0x44u) /* 5.3.14 */
#define RCC_DCKCFGR2  ZO_REG32(RCC_BASE + 0x90u) /* 5.3.26 */

#define RCC_CR_HSEON          (1u << 16)
#define RCC_CR_HSERDY         (1u << 17)
#define RCC_CR_HSEBYP         (1u << 18) /* 0: crystal between OSC_IN and OSC_OUT */
#define RCC_CR_PLLON          (1u << 24)
#define RCC_CR_PLLRDY         (1u << 25)

#define RCC_PLLCFGR_PLLM_POS   0u         /* bits 5:0 */
#define RCC_PLLCFGR_PLLN_POS   6u         /* bits 14:6 */
#define RCC_PLLCFGR_PLLP_POS   16u        /* bits 17:16: 00 = /2, 01 = /4, 10 = /6, 11 = /8 */
#define RCC_PLLCFGR_PLLSRC_HSE (1u << 22) /* 0: HSI, 1: HSE */
#define RCC_PLLCFGR_PLLQ_POS   24u        /* bits 27:24 */
/* The fields this file writes; bits 31:28 (bit 29 set at reset, 0x24003010), 23 and 21:18
 * are reserved and kept. */
#define RCC_PLLCFGR_FIELDS     ((0x3Fu << 0) | (0x1FFu << 6) | (3u << 16) | (1u << 22) \
                                | (0xFu << 24))

#define RCC_CFGR_SW           (3u << 0)  /* bits 1:0 system clock switch */
#define RCC_CFGR_SW_PLL       (2u << 0)  /* 00 HSI, 01 HSE, 10 PLL */
#define RCC_CFGR_SWS_POS      2u         /* bits 3:2 switch status, same codes */
#define RCC_CFGR_HPRE_POS     4u         /* bits 7:4 AHB prescaler */
#define RCC_CFGR_PPRE1_POS    10u        /* bits 12:10 APB1 prescaler */
#define RCC_CFGR_PPRE2_POS    13u        /* bits 15:13 APB2 prescaler */
#define RCC_CFGR_HPRE_DIV1    (0x0u << RCC_CFGR_HPRE_POS)
#define RCC_CFGR_PPRE1_DIV4   (0x5u << RCC_CFGR_PPRE1_POS) /* 101 */
#define RCC_CFGR_PPRE2_DIV2   (0x4u << RCC_CFGR_PPRE2_POS) /* 100 */
#define RCC_CFGR_PRESCALERS   ((0xFu << RCC_CFGR_HPRE_POS) | (0x7u << RCC_CFGR_PPRE1_POS) \
                               | (0x7u << RCC_CFGR_PPRE2_POS))

#define RCC_AHB1ENR_GPIOAEN     (1u << 0)
#define RCC_AHB1ENR_GPIOBEN     (1u << 1)
#define RCC_APB1ENR_PWREN       (1u << 28)
#define RCC_APB2ENR_USART1EN    (1u << 4)
#define RCC_DCKCFGR2_USART1SEL  (3u << 0)        /* 00: PCLK2 (reset value) */

/* ---- PWR: RM0385 section 4.4 "PWR registers", base 0x40007000 (2.2.2, table 1) --------- */

#define PWR_BASE      0x40007000u
#define PWR_CR1       ZO_REG32(PWR_BASE + 0x00u) /* 4.4.1 power control register 1 */
#define PWR_CSR1      ZO_REG32(PWR_BASE + 0x04u) /* 4.4.2 power control/status register 1 */
#define PWR_CR1_VOS       (3u << 14)  /* bits 15:14: 11 = scale 1 (reset value); written with
                                       * the PLL off, applies once the PLL is on */
#define PWR_CR1_ODEN      (1u << 16)  /* over-drive enable */
#define PWR_CR1_ODSWEN    (1u << 17)  /* over-drive switching enable */
#define PWR_CSR1_ODRDY    (1u << 16)
#define PWR_CSR1_ODSWRDY  (1u << 17)

/* ---- FLASH interface: RM0385 chapter 3, "FLASH registers"; base 0x40023C00 (2.2.2) ----- */

#define FLASH_BASE    0x40023C00u
#define FLASH_ACR     ZO_REG32(FLASH_BASE + 0x00u) /* FLASH_ACR, access control */
#define FLASH_ACR_LATENCY (0xFu << 0)               /* bits 3:0: wait states */

/* ---- GPIO: RM0385 section 6.4 ----------------------------------------------------------- */

#define GPIOA_BASE    0x40020000u
#define GPIOB_BASE    0x40020400u

#define VCP_TX_PORT   GPIOA_BASE
#define VCP_TX_PIN    9u
#define VCP_RX_PORT   GPIOB_BASE
#define VCP_RX_PIN    7u
#define VCP_AF        7u   /* AF7 = USART1 on PA9 and PB7 (DS10916 table 12) */

/* ---- USART1: RM0385 USART chapter, "USART registers"; base 0x40011000 ------------------- */

#define ZO_VCP_USART_BASE 0x40011000u /* USART1 */

/* ---- clock tree ------------------------------------------------------------------------- */

/* Timeouts, in milliseconds of the 16 MHz HSI that runs while clock_init() waits. Generous:
 * the crystal starts in about 2 ms and the PLL locks in well under 1 ms (DS10916 HSE and PLL
 * characteristics); ST's own drivers allow 100 ms for HSERDY and 2 ms for PLLRDY. */
#define ZO_HSE_TIMEOUT_MS       100u
#define ZO_PLL_TIMEOUT_MS       10u
#define ZO_OVERDRIVE_TIMEOUT_MS 100u
#define ZO_SWITCH_TIMEOUT_MS    10u
#define ZO_TIMEOUT(ms)          ZO_MS_TO_CYCLES(ms, ZO_HSI_HZ)

/* Back to the clock found on entry (SYSCLK = HSI, which clock_init() never leaves before its
 * last step): PLL and HSE off, the bus prescalers and the flash latency found on entry (wait
 * states may drop once the clock is low again, RM0385 3.3.2). Over-drive, if it came up,
 * stays on: it is valid at any frequency, and leaving it needs its own sequence. */
static void clock_undo(uint32_t prescalers, uint32_t latency)
{
    RCC_CR &= ~RCC_CR_PLLON;
    RCC_CR &= ~RCC_CR_HSEON;
    RCC_CFGR = (RCC_CFGR & ~RCC_CFGR_PRESCALERS) | prescalers;
    FLASH_ACR = (FLASH_ACR & ~FLASH_ACR_LATENCY) | latency;
    (void)FLASH_ACR;
}

/*
 * SYSCLK 216 MHz from the PLL fed by the HSE crystal, in the order of RM0385 section 4.1
 * (voltage regulator, "Entering Over-drive mode": HSI or HSE as the system clock; PLL
 * configured and started; ODEN, wait ODRDY; ODSWEN, wait ODSWRDY; flash latency and
 * prescalers; wait for PLL lock; switch SYSCLK to the PLL). Runs before any peripheral clock
 * is enabled, as the over-drive switch requires. Returns ZO_CLOCK_OK or the step that did not
 * complete (enum zo_clock_status, platform_stm32.c); then SYSCLK is still the 16 MHz HSI.
 */
static enum zo_clock_status clock_init(void)
{
    const uint32_t prescalers = RCC_CFGR & RCC_CFGR_PRESCALERS; /* for clock_undo() */
    const uint32_t latency = FLASH_ACR & FLASH_ACR_LATENCY;

    /* Only from the reset state: SYSCLK = HSI. Anything else (a core-only reset under a
     * debugger, a bootloader that already set clocks) is kept and measured as it is. */
    if (((RCC_CFGR >> RCC_CFGR_SWS_POS) & 3u) != 0u) {
        return ZO_CLOCK_NOT_FROM_RESET;
    }
    /* The PLL is configured only while it is off (RM0385 5.3.2); off at reset. */
    RCC_CR &= ~RCC_CR_PLLON;
    if (!zo_wait_bits(&RCC_CR, RCC_CR_PLLRDY, 0u, ZO_TIMEOUT(ZO_PLL_TIMEOUT_MS))) {
        return ZO_CLOCK_FAIL_PLL;
    }

    /* PWR interface clock (RM0385 5.3.13 PWREN), then voltage scale 1 (4.4.1 VOS = 11, the
     * reset value; VOS is written with the PLL off and takes effect when it starts). */
    RCC_APB1ENR |= RCC_APB1ENR_PWREN;
    (void)RCC_APB1ENR; /* read back: the clock is running before the first PWR access */
    zo_dsb_isb();
    PWR_CR1 |= PWR_CR1_VOS;

    /* HSE: the kit's 25 MHz crystal, so oscillator mode, not bypass (RM0385 5.2.1; 5.3.1
     * HSEON, HSERDY, HSEBYP). */
    RCC_CR &= ~RCC_CR_HSEBYP;
    RCC_CR |= RCC_CR_HSEON;
    if (!zo_wait_bits(&RCC_CR, RCC_CR_HSERDY, RCC_CR_HSERDY, ZO_TIMEOUT(ZO_HSE_TIMEOUT_MS))) {
        clock_undo(prescalers, latency);
        return ZO_CLOCK_FAIL_HSE;
    }

    /* PLL: HSE / 25 = 1 MHz -> x432 = 432 MHz VCO -> /2 = 216 MHz SYSCLK, /9 = 48 MHz. */
    RCC_PLLCFGR = (RCC_PLLCFGR & ~RCC_PLLCFGR_FIELDS)
                  | (ZO_PLL_M << RCC_PLLCFGR_PLLM_POS)
                  | (ZO_PLL_N << RCC_PLLCFGR_PLLN_POS)
                  | ((ZO_PLL_P / 2u - 1u) << RCC_PLLCFGR_PLLP_POS)
                  | RCC_PLLCFGR_PLLSRC_HSE
                  | (ZO_PLL_Q << RCC_PLLCFGR_PLLQ_POS);
    RCC_CR |= RCC_CR_PLLON;

    /* Over-drive, required above 180 MHz (RM0385 4.1, "Entering Over-drive mode"; 4.4.1
     * ODEN/ODSWEN, 4.4.2 ODRDY/ODSWRDY). The system clock stalls while the regulator
     * switches. */
    PWR_CR1 |= PWR_CR1_ODEN;
    if (!zo_wait_bits(&PWR_CSR1, PWR_CSR1_ODRDY, PWR_CSR1_ODRDY,
                      ZO_TIMEOUT(ZO_OVERDRIVE_TIMEOUT_MS))) {
        PWR_CR1 &= ~PWR_CR1_ODEN;
        clock_undo(prescalers, latency);
        return ZO_CLOCK_FAIL_OVERDRIVE;
    }
    PWR_CR1 |= PWR_CR1_ODSWEN;
    if (!zo_wait_bits(&PWR_CSR1, PWR_CSR1_ODSWRDY, PWR_CSR1_ODSWRDY,
                      ZO_TIMEOUT(ZO_OVERDRIVE_TIMEOUT_MS))) {
        PWR_CR1 &= ~PWR_CR1_ODSWEN; /* leave over-drive in the reverse order */
        PWR_CR1 &= ~PWR_CR1_ODEN;
        clock_undo(prescalers, latency);
        return ZO_CLOCK_FAIL_OVERDRIVE;
    }

    /* Flash wait states BEFORE the clock goes up, then read FLASH_ACR back to check that the
     * new latency is in force (RM0385 3.3.2, the procedure for increasing the CPU
     * frequency). */
    FLASH_ACR = (FLASH_ACR & ~FLASH_ACR_LATENCY) | ZO_FLASH_WS;
    if ((FLASH_ACR & FLASH_ACR_LATENCY) != ZO_FLASH_WS) {
        clock_undo(prescalers, latency);
        return ZO_CLOCK_FAIL_FLASH;
    }

    /* Bus prescalers while still on HSI (PCLK1 4 MHz, PCLK2 8 MHz until the switch), so no
     * bus ever runs above its maximum: AHB /1, APB1 /4, APB2 /2 (RM0385 5.3.3). */
    RCC_CFGR = (RCC_CFGR & ~RCC_CFGR_PRESCALERS)
               | RCC_CFGR_HPRE_DIV1 | RCC_CFGR_PPRE1_DIV4 | RCC_CFGR_PPRE2_DIV2;

    if (!zo_wait_bits(&RCC_CR, RCC_CR_PLLRDY, RCC_CR_PLLRDY, ZO_TIMEOUT(ZO_PLL_TIMEOUT_MS))) {
        clock_undo(prescalers, latency);
        return ZO_CLOCK_FAIL_PLL;
    }

    /* Switch SYSCLK to the PLL and wait until SWS says it happened (RM0385 5.3.3). */
    RCC_CFGR = (RCC_CFGR & ~RCC_CFGR_SW) | RCC_CFGR_SW_PLL;
    if (!zo_wait_bits(&RCC_CFGR, 3u << RCC_CFGR_SWS_POS, RCC_CFGR_SW_PLL << RCC_CFGR_SWS_POS,
                      ZO_TIMEOUT(ZO_SWITCH_TIMEOUT_MS))) {
        RCC_CFGR &= ~RCC_CFGR_SW; /* back to HSI */
        if (zo_wait_bits(&RCC_CFGR, 3u << RCC_CFGR_SWS_POS, 0u,
                         ZO_TIMEOUT(ZO_SWITCH_TIMEOUT_MS))) {
            clock_undo(prescalers, latency);
        }
        return ZO_CLOCK_FAIL_SWITCH;
    }
    return ZO_CLOCK_OK;
}

/* What runs now, from the RCC registers (RM0385 5.2 clock tree; 5.3.2, 5.3.3): SYSCLK from
 * SWS (and the PLL fields when it is the PLL), HCLK = core, PCLK2 = USART1's kernel clock. */
static void clock_measure(struct zo_clocks *clocks)
{
    uint32_t cfgr = RCC_CFGR;
    uint32_t sysclk = ZO_HSI_HZ;
    switch ((cfgr >> RCC_CFGR_SWS_POS) & 3u) {
    case 1u:
        sysclk = ZO_HSE_HZ;
        break;
    case 2u: {
        uint32_t pll = RCC_PLLCFGR;
        uint32_t in = (pll & RCC_PLLCFGR_PLLSRC_HSE) != 0u ? ZO_HSE_HZ : ZO_HSI_HZ;
        uint32_t m = (pll >> RCC_PLLCFGR_PLLM_POS) & 0x3Fu;
        uint32_t n = (pll >> RCC_PLLCFGR_PLLN_POS) & 0x1FFu;
        uint32_t p = 2u * (((pll >> RCC_PLLCFGR_PLLP_POS) & 3u) + 1u);
        if (m != 0u) {
            sysclk = (uint32_t)((uint64_t)in * n / m / p);
        }
        break;
    }
    default:
        break;
    }
    clocks->sysclk_hz = sysclk;
    clocks->core_hz = sysclk / zo_ahb_divider((cfgr >> RCC_CFGR_HPRE_POS) & 0xFu);
    clocks->usart_hz = clocks->core_hz / zo_apb_divider((cfgr >> RCC_CFGR_PPRE2_POS) & 7u);
    if (clocks->core_hz == 0u) { /* a PLL with N = 0: not a state this file ever sets */
        clocks->core_hz = ZO_HSI_HZ;
    }
}

/* Clocks of the VCP pins' GPIO ports and of USART1, USART1's kernel clock = PCLK2. */
static void board_serial_clocks(void)
{
    RCC_AHB1ENR |= RCC_AHB1ENR_GPIOAEN | RCC_AHB1ENR_GPIOBEN;
    RCC_APB2ENR |= RCC_APB2ENR_USART1EN;
    (void)RCC_APB2ENR; /* read back: the clock is running before the first access (5.3) */
    zo_dsb_isb();
    RCC_DCKCFGR2 &= ~RCC_DCKCFGR2_USART1SEL; /* kernel clock = PCLK2 (the reset value) */
}

#endif /* ZO_BOARD_STM32F746_H */
