/*
 * Board description for the STM32H7B3LIH6Q on the STM32H7B3I-DK kit (zocodegen).
 *
 * Serial link: the STLINK-V3E virtual COM port, wired to USART1 with TX = PA9 and
 * RX = PA10 (UM2569 "Virtual COM port (VCP)" and the kit's I/O assignment), both alternate
 * function AF7 (STM32H7B3xI datasheet DS13139, "Port A alternate functions" table).
 * 115200 baud, 8 data bits, no parity, 1 stop bit, polled, no flow control.
 *
 * Clock: clock_init() keeps the reset clock: the 64 MHz HSI RC oscillator (HSIDIV = 1 at
 * reset) drives SYSCLK, and the CPU domain (CDCPRE, HPRE) and APB2 (CDPPRE2) prescalers are 1,
 * so rcc_pclk2 = 64 MHz (RM0455 RCC chapter, reset values of RCC_CR, RCC_CFGR, RCC_CDCFGR1,
 * RCC_CDCFGR2). The 280 MHz configuration (target.json clock_hz) is a later issue. USART1's
 * kernel clock is rcc_pclk2 at reset (RCC_CDCCIP2R.USART16910SEL = 000), so the baud-rate
 * divider is computed from 64 MHz.
 *
 * Cycle counter: DWT CYCCNT (core clock cycles), unlocked through DWT_LAR as the
 * Cortex-M7 requires when no debugger has unlocked it.
 *
 * Caches: the Cortex-M7 L1 instruction and data caches are enabled (ZO_CACHES=0 at compile
 * time keeps them off). Safe here: nothing uses DMA, DTCM is never cached, peripherals are
 * Device memory in the default memory map, and the default attributes of flash and AXI SRAM
 * are write-back write-allocate.
 *
 * Register addresses: RM0455 (STM32H7A3/7B3/7B0 reference manual) and the ARMv7-M
 * Architecture Reference Manual (DDI 0403E); the section of each is next to its #define.
 */
#ifndef ZO_BOARD_STM32H7B3_H
#define ZO_BOARD_STM32H7B3_H

/* Included by platform_stm32.c (shared by both STM32 targets), after ZO_REG32. */

/* ---- clocks ---------------------------------------------------------------------------- */

#define ZO_HSI_HZ     64000000u  /* RM0455 RCC chapter, "HSI oscillator": 64 MHz RC, HSIDIV=1 */
#define ZO_SYSCLK_HZ  ZO_HSI_HZ  /* what clock_init() leaves running */
#define ZO_PCLK2_HZ   ZO_SYSCLK_HZ /* CDCPRE = HPRE = CDPPRE2 = 1 at reset */
/* The Cortex-M7 runs on sys_ck / CDCPRE (RM0455 RCC chapter, "System and bus clocks"),
 * CDCPRE = 1 at reset: what DWT CYCCNT counts, and what HELLO reports as cycles per second. */
#define ZO_CORE_HZ    ZO_SYSCLK_HZ
#define ZO_BAUD       115200u

#define ZO_BOARD_NAME "stm32h7b3" /* platform_name(): the target name of zocodegen build */

/* ---- RCC: RM0455 RCC chapter "RCC register description", base 0x58024400 (section 2.3) -- */

#define RCC_BASE      0x58024400u
#define RCC_CDCCIP2R  ZO_REG32(RCC_BASE + 0x054u) /* CD domain kernel clock config 2 */
#define RCC_AHB4ENR   ZO_REG32(RCC_BASE + 0x0E0u) /* AHB4 (SRD) peripheral clock enable */
#define RCC_APB2ENR   ZO_REG32(RCC_BASE + 0x0F0u) /* APB2 peripheral clock enable */
#define RCC_AHB4ENR_GPIOAEN     (1u << 0)
#define RCC_APB2ENR_USART1EN    (1u << 4)
#define RCC_CDCCIP2R_USART16910SEL (7u << 3) /* 000: rcc_pclk2 (reset value) */

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

/*
 * Clock tree and supply. CURRENTLY KEEPS THE RESET CLOCK: SYSCLK = HSI = 64 MHz with the
 * reset voltage scale and the reset flash wait states (enough for 64 MHz), every bus prescaler
 * 1. The 280 MHz configuration is a later issue and needs, in this order: the supply
 * configuration in PWR_CR3 (the kit is wired for the internal SMPS, UM2569 power-supply
 * section; PWR_CR3 is write-once per power-on and a value that does not match the board's
 * wiring can leave the device unable to start until it is recovered through BOOT0, which is
 * why it is not written speculatively here), VOS0, flash wait states, HSE 24 MHz and PLL1.
 * When it lands, ZO_PCLK2_HZ, ZO_CORE_HZ and the baud-rate divider below must follow.
 */
static void clock_init(void)
{
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
