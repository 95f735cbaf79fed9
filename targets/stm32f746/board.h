/*
 * Board description for the STM32F746NG on the 32F746GDISCOVERY kit (zocodegen).
 *
 * Serial link: the ST-LINK/V2-1 virtual COM port, wired to USART1 with TX = PA9 and
 * RX = PB7 (UM1907 "USB virtual COM port" and the I/O assignment table), both alternate
 * function AF7 (STM32F746xx datasheet DS10916, table 12 "Alternate function mapping").
 * 115200 baud, 8 data bits, no parity, 1 stop bit, polled, no flow control.
 *
 * Clock: clock_init() keeps the reset clock: the 16 MHz HSI RC oscillator drives SYSCLK,
 * AHB and APB2 undivided (RM0385 section 5.2 "Clocks", RCC_CFGR reset value 0). The 216 MHz
 * PLL configuration (target.json clock_hz) is a later issue. USART1's kernel clock is PCLK2
 * at reset (RCC_DCKCFGR2.USART1SEL = 00), so the baud-rate divider is computed from 16 MHz.
 *
 * Cycle counter: DWT CYCCNT (core clock cycles), unlocked through DWT_LAR as the
 * Cortex-M7 requires when no debugger has unlocked it.
 *
 * Caches: the Cortex-M7 L1 instruction and data caches are enabled (ZO_CACHES=0 at compile
 * time keeps them off). Safe here: nothing uses DMA, DTCM is never cached, peripherals are
 * Device memory in the default memory map, and the default attributes of flash and SRAM1/2
 * are write-back write-allocate (no write-through erratum exposure).
 *
 * Register addresses: RM0385 rev 8 (STM32F75xxx/74xxx reference manual) and the ARMv7-M
 * Architecture Reference Manual (DDI 0403E); the section of each is next to its #define.
 */
#ifndef ZO_BOARD_STM32F746_H
#define ZO_BOARD_STM32F746_H

/* Included by platform_stm32.c (shared by both STM32 targets), after ZO_REG32. */

/* ---- clocks ---------------------------------------------------------------------------- */

#define ZO_HSI_HZ     16000000u  /* RM0385 section 5.2.2 "HSI clock": 16 MHz RC */
#define ZO_SYSCLK_HZ  ZO_HSI_HZ  /* what clock_init() leaves running */
#define ZO_PCLK2_HZ   ZO_SYSCLK_HZ /* HPRE = PPRE2 = 1 at reset */
/* The Cortex-M7 runs on HCLK = SYSCLK / HPRE (RM0385 section 5.2, figure 13), HPRE = 1 at
 * reset: what DWT CYCCNT counts, and what HELLO reports as cycles per second. */
#define ZO_CORE_HZ    ZO_SYSCLK_HZ
#define ZO_BAUD       115200u

#define ZO_BOARD_NAME "stm32f746" /* platform_name(): the target name of zocodegen build */

/* ---- RCC: RM0385 section 5.3, base 0x40023800 (section 2.2.2, table 1) ------------------ */

#define RCC_BASE      0x40023800u
#define RCC_AHB1ENR   ZO_REG32(RCC_BASE + 0x30u) /* 5.3.10 */
#define RCC_APB2ENR   ZO_REG32(RCC_BASE + 0x44u) /* 5.3.14 */
#define RCC_DCKCFGR2  ZO_REG32(RCC_BASE + 0x90u) /* 5.3.26 */
#define RCC_AHB1ENR_GPIOAEN     (1u << 0)
#define RCC_AHB1ENR_GPIOBEN     (1u << 1)
#define RCC_APB2ENR_USART1EN    (1u << 4)
#define RCC_DCKCFGR2_USART1SEL  (3u << 0)        /* 00: PCLK2 (reset value) */

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

/*
 * Clock tree. CURRENTLY KEEPS THE RESET CLOCK: SYSCLK = HSI = 16 MHz, flash at 0 wait states
 * (valid up to 30 MHz, RM0385 section 3.3.2 table 5), every bus prescaler 1. Bringing up the
 * PLL to 216 MHz (HSE 25 MHz on the kit, over-drive, 7 wait states) is a later issue; when it
 * lands, ZO_PCLK2_HZ, ZO_CORE_HZ and the baud-rate divider below must follow.
 */
static void clock_init(void)
{
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
