/*
 * platform.h for both STM32 Cortex-M7 boards (zocodegen): the ST-LINK virtual COM port on a
 * polled USART (8N1 at the build's --baud, FIRMWARE_BAUD), the DWT cycle counter (platform_cycles() and the timeouts of
 * platform_read_byte()), the L1 caches. The USART, GPIO and core
 * registers are the same IP on the STM32F7 and STM32H7; what differs (clock tree, RCC enable
 * bits, pins, kernel clock frequency) comes from board.h, one per target, whose comment says
 * which manual sections it follows. Register offsets: RM0385 / RM0455 (USART and GPIO
 * chapters) and the ARMv7-M Architecture Reference Manual (DDI 0403E).
 *
 * Clocks: board.h's clock_init() brings the board up to full speed (F746 216 MHz, H7B3
 * 280 MHz) and gives up, leaving a slower but valid clock, at the first step that does not
 * complete in time; clock_measure() then decodes the RCC registers into zo_clocks. Every
 * frequency used at run time (the USART baud-rate divider, the DWT timeouts,
 * platform_cycles_per_second()) comes from zo_clocks, never from the nominal ZO_CORE_HZ, so
 * a board whose crystal does not start still talks at FIRMWARE_BAUD. In a debugger:
 * `print zo_clocks` (core_hz, usart_hz, and status = the step where clock_init() stopped).
 */
#include <stdint.h>

#include "firmware.h" /* FIRMWARE_BAUD */
#include "platform.h"

#ifndef ZO_CACHES
#define ZO_CACHES 1
#endif

#define ZO_REG32(addr) (*(volatile uint32_t *)(uintptr_t)(addr))

static inline void zo_dsb_isb(void)
{
    __asm volatile("dsb\n\tisb" ::: "memory");
}

/* ---- Cortex-M7 core: ARMv7-M ARM (DDI 0403E) -------------------------------------------- */

#define SCB_CCR       ZO_REG32(0xE000ED14u) /* B3.2.8 CCR */
#define SCB_CCR_DC    (1u << 16)
#define SCB_CCR_IC    (1u << 17)
#define SCB_CCSIDR    ZO_REG32(0xE000ED80u) /* B4.8 cache size ID (CCSIDR) */
#define SCB_CSSELR    ZO_REG32(0xE000ED84u) /* B4.8 cache size selection (CSSELR) */
#define SCB_ICIALLU   ZO_REG32(0xE000EF50u) /* B2.2 cache maintenance: ICIALLU */
#define SCB_DCISW     ZO_REG32(0xE000EF60u) /* B2.2 cache maintenance: DCISW */

#define DHCSR         ZO_REG32(0xE000EDF0u) /* C1.6 DHCSR */
#define DHCSR_C_DEBUGEN (1u << 0)
#define DEMCR         ZO_REG32(0xE000EDFCu) /* C1.6 DEMCR */
#define DEMCR_TRCENA  (1u << 24)
#define DWT_CTRL      ZO_REG32(0xE0001000u) /* C1.8 DWT control */
#define DWT_CTRL_CYCCNTENA (1u << 0)
#define DWT_CYCCNT    ZO_REG32(0xE0001004u) /* C1.8 DWT cycle count */
/* Lock access register (CoreSight, offset 0xFB0; Cortex-M7 TRM DDI 0489 DWT register
 * summary): writes to the DWT are ignored until 0xC5ACCE55 is written here. */
#define DWT_LAR       ZO_REG32(0xE0001FB0u)
#define DWT_LAR_KEY   0xC5ACCE55u

/* ---- clock state shared with board.h ----------------------------------------------------- */

/* Where clock_init() stopped. ZO_CLOCK_OK: the full-speed configuration runs. Any other
 * value: that step did not complete (ready flag not set within its timeout, or a read-back
 * mismatch), what it had started was undone where that is safe, and SYSCLK stayed on the
 * reset oscillator (HSI). Which steps exist depends on the board (board.h). */
enum zo_clock_status {
    ZO_CLOCK_OK = 0,
    ZO_CLOCK_NOT_FROM_RESET,   /* SYSCLK was not the reset HSI on entry: left as it was */
    ZO_CLOCK_FAIL_SUPPLY,      /* H7: PWR_CR3 already locked to another supply, or ACTVOSRDY */
    ZO_CLOCK_FAIL_VOLTAGE,     /* H7: VOS0 not ready (VOSRDY) */
    ZO_CLOCK_FAIL_HSE,         /* HSERDY: no crystal, or it does not start */
    ZO_CLOCK_FAIL_OVERDRIVE,   /* F7: ODRDY or ODSWRDY */
    ZO_CLOCK_FAIL_FLASH,       /* FLASH_ACR latency read back different */
    ZO_CLOCK_FAIL_PLL,         /* PLL(1)RDY: no lock */
    ZO_CLOCK_FAIL_SWITCH       /* SWS did not follow SW */
};

/* The clocks running after platform_init(), decoded from the RCC registers (board.h
 * clock_measure()). All zero before platform_init(): platform_cycles_per_second() then says
 * 0, "unknown", as platform.h allows. Not static, so a debugger finds it by name. */
struct zo_clocks {
    uint32_t sysclk_hz;            /* SYSCLK (F7) / sys_ck (H7) */
    uint32_t core_hz;              /* Cortex-M7 clock: the DWT CYCCNT rate */
    uint32_t usart_hz;             /* the VCP USART's kernel clock (PCLK2 on both boards) */
    enum zo_clock_status status;   /* where clock_init() stopped */
};
struct zo_clocks zo_clocks;

/* CYCCNT ticks in `ms` milliseconds at `hz`; the waits of clock_init() run before the clock
 * changes, so `hz` is the reset oscillator's frequency. */
#define ZO_MS_TO_CYCLES(ms, hz) ((uint32_t)(ms) * ((hz) / 1000u))

/* Polls *reg until (*reg & mask) == want. Gives up after timeout_cycles of DWT CYCCNT
 * (cycle_counter_init() runs before clock_init()); each poll takes at least one cycle, so
 * the poll count also bounds the loop should the counter not run. 1: the bits matched. */
static int zo_wait_bits(volatile uint32_t *reg, uint32_t mask, uint32_t want,
                        uint32_t timeout_cycles)
{
    uint32_t start = DWT_CYCCNT;
    for (uint32_t polls = 0u; polls < timeout_cycles; polls++) {
        if ((*reg & mask) == want) {
            return 1;
        }
        if (DWT_CYCCNT - start >= timeout_cycles) {
            break;
        }
    }
    return (*reg & mask) == want;
}

/* Bus prescaler fields, the same encodings on both families (RM0385 5.3.3 RCC_CFGR
 * HPRE/PPRE1/PPRE2; RM0455 RCC_CDCFGR1 CDCPRE/HPRE/CDPPRE, RCC_CDCFGR2 CDPPRE1/CDPPRE2,
 * RCC_SRDCFGR SRDPPRE). AHB-style, 4 bits: 0xxx = /1, 1000 = /2, 1001 = /4, 1010 = /8,
 * 1011 = /16, 1100 = /64, 1101 = /128, 1110 = /256, 1111 = /512 (no /32). */
static uint32_t zo_ahb_divider(uint32_t field)
{
    static const uint16_t div[8] = {2u, 4u, 8u, 16u, 64u, 128u, 256u, 512u};
    return (field & 0x8u) != 0u ? div[field & 0x7u] : 1u;
}

/* APB-style, 3 bits: 0xx = /1, 100 = /2, 101 = /4, 110 = /8, 111 = /16. */
static uint32_t zo_apb_divider(uint32_t field)
{
    return (field & 0x4u) != 0u ? 2u << (field & 0x3u) : 1u;
}

#include "board.h"

/* ---- GPIO (same layout on F7 and H7: RM0385 6.4, RM0455 GPIO registers) ---------------- */

#define GPIO_MODER(b)   ZO_REG32((b) + 0x00u) /* 6.4.1: 2 bits per pin, 10 = alternate */
#define GPIO_OTYPER(b)  ZO_REG32((b) + 0x04u) /* 6.4.2: 0 = push-pull */
#define GPIO_OSPEEDR(b) ZO_REG32((b) + 0x08u) /* 6.4.3: 01 = medium speed */
#define GPIO_PUPDR(b)   ZO_REG32((b) + 0x0Cu) /* 6.4.4: 01 = pull-up */
#define GPIO_AFR(b, i)  ZO_REG32((b) + 0x20u + 4u * (i)) /* 6.4.9 AFRL, 6.4.10 AFRH */


/* ---- USART (same layout on F7 and H7: RM0385 / RM0455 "USART registers") --------------- */

#define USART_CR1     ZO_REG32(ZO_VCP_USART_BASE + 0x00u)
#define USART_CR2     ZO_REG32(ZO_VCP_USART_BASE + 0x04u)
#define USART_CR3     ZO_REG32(ZO_VCP_USART_BASE + 0x08u)
#define USART_BRR     ZO_REG32(ZO_VCP_USART_BASE + 0x0Cu)
#define USART_ISR     ZO_REG32(ZO_VCP_USART_BASE + 0x1Cu)
#define USART_ICR     ZO_REG32(ZO_VCP_USART_BASE + 0x20u)
#define USART_RDR     ZO_REG32(ZO_VCP_USART_BASE + 0x24u)
#define USART_TDR     ZO_REG32(ZO_VCP_USART_BASE + 0x28u)
#define USART_PRESC   ZO_REG32(ZO_VCP_USART_BASE + 0x2Cu) /* H7 only */
#define USART_CR1_UE  (1u << 0)
#define USART_CR1_RE  (1u << 2)
#define USART_CR1_TE  (1u << 3)
#define USART_CR1_OVER8 (1u << 15)
#define USART_ISR_PE  (1u << 0)
#define USART_ISR_FE  (1u << 1)
#define USART_ISR_NE  (1u << 2)
#define USART_ISR_ORE (1u << 3)
#define USART_ISR_RXNE (1u << 5)
#define USART_ISR_TC  (1u << 6)
#define USART_ISR_TXE (1u << 7)
#define USART_ISR_TEACK (1u << 21)
#define USART_ISR_ERRORS (USART_ISR_PE | USART_ISR_FE | USART_ISR_NE | USART_ISR_ORE)
/* ICR clear bits sit at the same positions as the ISR flags they clear (PECF, FECF, NCF,
 * ORECF = bits 0..3). */
#define USART_ICR_ERRORS (0xFu)

/* Exit status of platform_exit(), for a debugger to read. */
volatile int zo_exit_status;

static void cache_enable(void)
{
#if ZO_CACHES
    if ((SCB_CCR & SCB_CCR_IC) == 0u) {
        zo_dsb_isb();
        SCB_ICIALLU = 0u;
        zo_dsb_isb();
        SCB_CCR |= SCB_CCR_IC;
        zo_dsb_isb();
    }
    if ((SCB_CCR & SCB_CCR_DC) == 0u) {
        /* Invalidate every line of the L1 data cache by set/way before turning it on: its
         * contents are unknown after reset (B2.2, set/way operand format). */
        SCB_CSSELR = 0u; /* level 1, data */
        zo_dsb_isb();
        uint32_t ccsidr = SCB_CCSIDR;
        uint32_t line_shift = (ccsidr & 0x7u) + 4u;          /* log2(line bytes) */
        uint32_t ways = ((ccsidr >> 3) & 0x3FFu) + 1u;
        uint32_t sets = ((ccsidr >> 13) & 0x7FFFu) + 1u;
        uint32_t way_shift = ways > 1u ? (uint32_t)__builtin_clz(ways - 1u) : 0u;
        for (uint32_t set = 0; set < sets; set++) {
            for (uint32_t way = 0; way < ways; way++) {
                SCB_DCISW = (ways > 1u ? way << way_shift : 0u) | (set << line_shift);
            }
        }
        zo_dsb_isb();
        SCB_CCR |= SCB_CCR_DC;
        zo_dsb_isb();
    }
#endif
}

static void cycle_counter_init(void)
{
    DEMCR |= DEMCR_TRCENA;
    DWT_LAR = DWT_LAR_KEY;
    DWT_CYCCNT = 0u;
    DWT_CTRL |= DWT_CTRL_CYCCNTENA;
}

static void gpio_alternate(uint32_t port, uint32_t pin, uint32_t af, int pull_up)
{
    uint32_t two = 2u * pin;
    GPIO_AFR(port, pin / 8u) = (GPIO_AFR(port, pin / 8u) & ~(0xFu << (4u * (pin % 8u))))
                               | (af << (4u * (pin % 8u)));
    GPIO_OTYPER(port) &= ~(1u << pin);
    GPIO_OSPEEDR(port) = (GPIO_OSPEEDR(port) & ~(3u << two)) | (1u << two);
    GPIO_PUPDR(port) = (GPIO_PUPDR(port) & ~(3u << two)) | ((pull_up ? 1u : 0u) << two);
    GPIO_MODER(port) = (GPIO_MODER(port) & ~(3u << two)) | (2u << two);
}

static void vcp_usart_init(void)
{
    board_serial_clocks();

    /* 8N1 (FIFO off on the H7) at f_ck / m, m = f_ck / baud rounded, from the kernel clock
     * actually running (zo_clocks.usart_hz, set by clock_measure()). Oversampling by 16 takes
     * BRR = m for m >= 16; by 8 (OVER8) it reaches m = 8..15, as USARTDIV = 2m with its low
     * nibble shifted right by one and BRR[3] clear (RM0385 31.5.4, RM0455 "USART baud rate
     * generation"). At 1,228,800 baud: F7 PCLK2 108 MHz -> 88 (-0.12 %), H7 rcc_pclk2
     * 140 MHz -> 114 (-0.06 %); on the reset clock F7 16 MHz -> 13 by 8 (+0.16 %), H7
     * 64 MHz -> 52 (+0.16 %). `zocodegen build --baud` refuses a rate either clock misses by
     * more than 2 %. */
    const uint32_t m = (zo_clocks.usart_hz + FIRMWARE_BAUD / 2u) / FIRMWARE_BAUD;
    uint32_t over8 = 0u;
    USART_CR1 = 0u;
    USART_CR2 = 0u;
    USART_CR3 = 0u;
#if defined(ZO_USART_HAS_PRESC)
    USART_PRESC = 0u;
#endif
    if (m >= 16u) {
        USART_BRR = m;
    } else {
        USART_BRR = ((2u * m) & ~0xFu) | (((2u * m) & 0xFu) >> 1);
        over8 = USART_CR1_OVER8;
    }
    USART_CR1 = over8 | USART_CR1_TE | USART_CR1_RE | USART_CR1_UE;
    while ((USART_ISR & USART_ISR_TEACK) == 0u) {
    }

    /* Pins last, so TX is already idling high when it is handed to the USART. */
    gpio_alternate(VCP_TX_PORT, VCP_TX_PIN, VCP_AF, 0);
    gpio_alternate(VCP_RX_PORT, VCP_RX_PIN, VCP_AF, 1);
}

void platform_init(void)
{
    cycle_counter_init();            /* first: clock_init() times its waits with CYCCNT */
    zo_clocks.status = clock_init(); /* board.h */
    clock_measure(&zo_clocks);       /* board.h: what runs now, read back from the RCC */
    cache_enable();
    vcp_usart_init();                /* after the clock switch: its divider needs usart_hz */
}

int platform_read_byte(uint8_t *byte, uint32_t timeout_ms)
{
    /* The deadline is counted in whole milliseconds of DWT CYCCNT, one by one, so any
     * timeout_ms works although the 32-bit counter wraps after 2^32 core cycles (19.9 s at
     * 216 MHz, 15.3 s at 280 MHz). The rate is the core clock measured by platform_init(). */
    const uint32_t cycles_per_ms = zo_clocks.core_hz / 1000u;
    uint32_t start = DWT_CYCCNT;
    uint32_t waited_ms = 0u;
    uint32_t isr;
    while (((isr = USART_ISR) & USART_ISR_RXNE) == 0u) {
        if ((isr & USART_ISR_ERRORS) != 0u) {
            USART_ICR = USART_ICR_ERRORS; /* a stuck ORE/FE flag must not stall reception */
        }
        while (DWT_CYCCNT - start >= cycles_per_ms) {
            start += cycles_per_ms;
            waited_ms++;
        }
        if (waited_ms >= timeout_ms) {
            return 0;
        }
    }
    *byte = (uint8_t)USART_RDR;
    return 1;
}

void platform_read(uint8_t *dst, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        while (!platform_read_byte(&dst[i], 0xFFFFFFFFu)) {
        }
    }
}

void platform_write(const uint8_t *src, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        while ((USART_ISR & USART_ISR_TXE) == 0u) {
        }
        USART_TDR = src[i];
    }
}

uint32_t platform_cycles(void)
{
    return DWT_CYCCNT;
}

uint32_t platform_cycles_per_second(void)
{
    return zo_clocks.core_hz; /* 0 before platform_init() */
}

const char *platform_name(void)
{
    return ZO_BOARD_NAME;
}

void platform_exit(int status)
{
    zo_exit_status = status;
    while ((USART_ISR & USART_ISR_TC) == 0u) { /* let the last byte leave */
    }
    if ((DHCSR & DHCSR_C_DEBUGEN) != 0u) {
        __asm volatile("bkpt #0");
    }
    for (;;) {
    }
}
