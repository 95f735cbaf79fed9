/*
 * platform.h for both STM32 Cortex-M7 boards (zocodegen): the ST-LINK virtual COM port on a
 * polled USART (115200 8N1), the DWT cycle counter (platform_cycles() and the timeouts of
 * platform_read_byte()), the L1 caches. The USART, GPIO and core
 * registers are the same IP on the STM32F7 and STM32H7; what differs (clock tree, RCC enable
 * bits, pins, kernel clock frequency) comes from board.h, one per target, whose comment says
 * which manual sections it follows. Register offsets: RM0385 / RM0455 (USART and GPIO
 * chapters) and the ARMv7-M Architecture Reference Manual (DDI 0403E).
 */
#include <stdint.h>

#include "platform.h"

#ifndef ZO_CACHES
#define ZO_CACHES 1
#endif

#define ZO_REG32(addr) (*(volatile uint32_t *)(uintptr_t)(addr))

static inline void zo_dsb_isb(void)
{
    __asm volatile("dsb\n\tisb" ::: "memory");
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

    /* 8N1, oversampling by 16 (FIFO off on the H7): BRR = f_ck / baud, rounded
     * (F7: 16 MHz / 115200 -> 139, +0.08 %; H7: 64 MHz -> 556, -0.08 %). */
    USART_CR1 = 0u;
    USART_CR2 = 0u;
    USART_CR3 = 0u;
#if defined(ZO_USART_HAS_PRESC)
    USART_PRESC = 0u;
#endif
    USART_BRR = (ZO_PCLK2_HZ + ZO_BAUD / 2u) / ZO_BAUD;
    USART_CR1 = USART_CR1_TE | USART_CR1_RE | USART_CR1_UE;
    while ((USART_ISR & USART_ISR_TEACK) == 0u) {
    }

    /* Pins last, so TX is already idling high when it is handed to the USART. */
    gpio_alternate(VCP_TX_PORT, VCP_TX_PIN, VCP_AF, 0);
    gpio_alternate(VCP_RX_PORT, VCP_RX_PIN, VCP_AF, 1);
}

void platform_init(void)
{
    clock_init();
    cache_enable();
    cycle_counter_init();
    vcp_usart_init();
}

int platform_read_byte(uint8_t *byte, uint32_t timeout_ms)
{
    /* The deadline is counted in whole milliseconds of DWT CYCCNT, one by one, so any
     * timeout_ms works although the 32-bit counter wraps after 2^32 core cycles (67 s at
     * 64 MHz). */
    const uint32_t cycles_per_ms = ZO_CORE_HZ / 1000u;
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
    return ZO_CORE_HZ;
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
