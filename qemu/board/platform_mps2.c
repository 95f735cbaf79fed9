/* platform_mps2.c - zocodegen platform for QEMU's mps2-an500 board (Cortex-M7).
 *
 * Implements include/platform.h with:
 *   - CMSDK APB UART0 at 0x40004000 for the byte stream (QEMU wires it to serial_hd(0),
 *     which the runner connects to its stdin/stdout);
 *   - CMSDK APB timer 0 at 0x40000000, clocked at the 25 MHz board clock, for
 *     platform_cycles() and the timeouts of platform_read_byte();
 *   - Arm semihosting SYS_EXIT_EXTENDED for platform_exit(), so QEMU's exit status is the
 *     firmware's status (requires `-semihosting-config enable=on`; the runner passes it).
 *
 * QEMU quirk (seen in 7.2): the CMSDK UART model never calls
 * qemu_chr_fe_accept_input() when the guest empties its one-byte RX buffer. QEMU's main
 * loop only re-asks the UART whether it can take a byte when something else wakes it, so
 * a guest that just polls STATE waits forever for the second byte of a burst. Two wake-ups
 * fix it, one for each QEMU execution mode:
 *   - without -icount (multi-threaded TCG), virtual-clock timers live in the main loop and
 *     re-arming one notifies it: before waiting for a byte we rewrite timer 1's RELOAD
 *     (timer 1 runs with a 1 ms period and is used for nothing else);
 *   - with -icount (single-threaded TCG), QEMU notifies the main loop when the CPU goes
 *     idle: we wait with WFI, woken by the UART0 RX interrupt (NVIC IRQ 0), which is
 *     enabled in the NVIC but never taken because PRIMASK is set (cpsid i).
 * Timeouts (platform_read_byte) need a wake-up without input too: timer 1's interrupt (IRQ 9
 * in QEMU's AN500 map, hw/arm/mps2.c: timers 0 and 1 are IRQs 8 and 9) is enabled the same
 * way, so a WFI ends at the latest 1 ms after it began, and the deadline is checked against
 * timer 0. Under -icount shift=0 virtual time advances with real time while the CPU sleeps
 * (QEMU's default icount sleep=on), so a timeout lasts about as long on the host's clock.
 * zocodegen firmware uses no interrupt handlers, so PRIMASK=1 costs nothing. On real
 * CMSDK hardware all of this is harmless.
 *
 * Sources for addresses and register layouts:
 *   - Arm AN500 "Example Cortex-M7 System Design for MPS2" memory map and QEMU 7.2
 *     hw/arm/mps2.c (checked with `info mtree`): timer0 0x40000000, timer1 0x40001000,
 *     dual timer 0x40002000, UART0 0x40004000; SYSCLK 25 MHz for every MPS2 image.
 *   - Arm Cortex-M System Design Kit TRM (DDI 0479C), programmers models of the APB UART
 *     and the APB timer; QEMU 7.2 hw/char/cmsdk-apb-uart.c and hw/timer/cmsdk-apb-timer.c
 *     implement the same offsets and bits.
 *   - "Semihosting for AArch32 and AArch64" (Arm, version 3.0): operation numbers, the
 *     ADP_Stopped_* reason codes and the T32 M-profile trap instruction BKPT 0xAB.
 */
#include <stdint.h>

#include "platform.h"

#define ZO_REG32(addr) (*(volatile uint32_t *)(uintptr_t)(addr))

/* ---- CMSDK APB UART (DDI 0479C, APB UART programmers model) ------------------------ */
#define ZO_UART0_BASE 0x40004000u
#define ZO_UART_DATA(b) ZO_REG32((b) + 0x000u)    /* [7:0] RX on read, TX on write */
#define ZO_UART_STATE(b) ZO_REG32((b) + 0x004u)   /* [0] TX full [1] RX full [3:2] overrun */
#define ZO_UART_CTRL(b) ZO_REG32((b) + 0x008u)    /* [0] TX en [1] RX en [5:2] irq en */
#define ZO_UART_INTCLR(b) ZO_REG32((b) + 0x00Cu)  /* INTSTATUS (read) / INTCLEAR (W1C) */
#define ZO_UART_BAUDDIV(b) ZO_REG32((b) + 0x010u) /* [19:0], minimum 16 */

#define ZO_UART_STATE_TXFULL 0x1u
#define ZO_UART_STATE_RXFULL 0x2u
#define ZO_UART_STATE_OVERRUN 0xCu
#define ZO_UART_CTRL_TXEN 0x1u
#define ZO_UART_CTRL_RXEN 0x2u
#define ZO_UART_CTRL_RXINTEN 0x8u
#define ZO_UART_INT_RX 0x2u
#define ZO_UART0_RX_IRQ 0u /* AN500 interrupt map: IRQ 0 = UART0 RX, IRQ 1 = UART0 TX */

/* 25 MHz / 115200 baud = 217. The divisor must be >= 16 or QEMU ignores it (and the TRM
 * forbids it); QEMU does not pace the link by it, so the value only has to be valid. */
#define ZO_SYSCLK_HZ 25000000u
#define ZO_UART_BAUD 115200u
#define ZO_UART_DIVISOR (ZO_SYSCLK_HZ / ZO_UART_BAUD)

/* ---- CMSDK APB timer (DDI 0479C, APB timer programmers model) ---------------------- */
#define ZO_TIMER0_BASE 0x40000000u /* platform_cycles(), timeouts */
#define ZO_TIMER1_BASE 0x40001000u /* wake-ups, see the quirk above */
#define ZO_TIMER_CTRL(b) ZO_REG32((b) + 0x000u)   /* [0] enable [1] ext en [2] ext clk [3] irq */
#define ZO_TIMER_VALUE(b) ZO_REG32((b) + 0x004u)  /* current value, counts down */
#define ZO_TIMER_RELOAD(b) ZO_REG32((b) + 0x008u) /* a write also loads VALUE */
#define ZO_TIMER_INTCLR(b) ZO_REG32((b) + 0x00Cu) /* INTSTATUS / INTCLEAR (W1C) */
#define ZO_TIMER_CTRL_EN 0x1u
#define ZO_TIMER_CTRL_IRQEN 0x8u
#define ZO_TICKS_PER_MS (ZO_SYSCLK_HZ / 1000u)
#define ZO_WAKE_TIMER_TICKS ZO_TICKS_PER_MS /* timer 1's period: 1 ms */
#define ZO_TIMER1_IRQ 9u /* AN500 interrupt map (QEMU hw/arm/mps2.c: timer n is IRQ 8 + n) */

/* ---- NVIC (ARMv7-M ARM DDI 0403E, B3.4) ------------------------------------------ */
#define ZO_NVIC_ISER0 0xE000E100u
#define ZO_NVIC_ICPR0 0xE000E280u

/* Under `-icount shift=0` one guest instruction advances virtual time by 2^0 ns, and the
 * timer ticks every 1e9 / 25e6 = 40 ns, so one tick = 40 instructions. Multiplying the
 * 32-bit tick count by 40 modulo 2^32 keeps differences of readings exact (and wrapping
 * like any 32-bit cycle counter) for intervals below 2^32 instructions (~4.3 s virtual). */
#define ZO_INSNS_PER_TICK (1000000000u / ZO_SYSCLK_HZ)
#define ZO_INSNS_PER_SECOND 1000000000u

/* ---- Semihosting (Arm semihosting spec v3.0) --------------------------------------- */
#define ZO_SH_SYS_EXIT 0x18u
#define ZO_SH_SYS_EXIT_EXTENDED 0x20u
#define ZO_ADP_STOPPED_APPLICATION_EXIT 0x20026u
#define ZO_ADP_STOPPED_RUNTIME_ERROR_UNKNOWN 0x20023u

static uint32_t zo_semihost(uint32_t op, uintptr_t arg)
{
    register uint32_t r0 __asm__("r0") = op;
    register uintptr_t r1 __asm__("r1") = arg;
    __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

void platform_init(void)
{
    /* UART0: disable while configuring, clear any overrun flags, set divisor, enable. */
    ZO_UART_CTRL(ZO_UART0_BASE) = 0u;
    ZO_UART_STATE(ZO_UART0_BASE) = ZO_UART_STATE_OVERRUN;
    ZO_UART_INTCLR(ZO_UART0_BASE) = 0xFu;
    ZO_UART_BAUDDIV(ZO_UART0_BASE) = ZO_UART_DIVISOR;
    /* RX interrupt only as a WFI wake-up: PRIMASK keeps it from ever being taken. */
    __asm__ volatile("cpsid i" ::: "memory");
    ZO_UART_CTRL(ZO_UART0_BASE) = ZO_UART_CTRL_TXEN | ZO_UART_CTRL_RXEN | ZO_UART_CTRL_RXINTEN;

    /* Timer 0: free-running down-counter over the full 32-bit range, no interrupt. */
    ZO_TIMER_CTRL(ZO_TIMER0_BASE) = 0u;
    ZO_TIMER_RELOAD(ZO_TIMER0_BASE) = 0xFFFFFFFFu; /* also loads VALUE */
    ZO_TIMER_VALUE(ZO_TIMER0_BASE) = 0xFFFFFFFFu;
    ZO_TIMER_INTCLR(ZO_TIMER0_BASE) = 1u;
    ZO_TIMER_CTRL(ZO_TIMER0_BASE) = ZO_TIMER_CTRL_EN;

    /* Timer 1: 1 ms period, interrupt as a WFI wake-up only (masked by PRIMASK). */
    ZO_TIMER_CTRL(ZO_TIMER1_BASE) = 0u;
    ZO_TIMER_RELOAD(ZO_TIMER1_BASE) = ZO_WAKE_TIMER_TICKS;
    ZO_TIMER_INTCLR(ZO_TIMER1_BASE) = 1u;
    ZO_TIMER_CTRL(ZO_TIMER1_BASE) = ZO_TIMER_CTRL_EN | ZO_TIMER_CTRL_IRQEN;

    ZO_REG32(ZO_NVIC_ICPR0) = (1u << ZO_UART0_RX_IRQ) | (1u << ZO_TIMER1_IRQ);
    ZO_REG32(ZO_NVIC_ISER0) = (1u << ZO_UART0_RX_IRQ) | (1u << ZO_TIMER1_IRQ);
}

static uint32_t timer0_ticks(void)
{
    /* The counter runs down from 0xFFFFFFFF and wraps after exactly 2^32 ticks, so its
     * complement is an up-counter modulo 2^32. */
    return ~ZO_TIMER_VALUE(ZO_TIMER0_BASE);
}

/* Sleeps until a byte arrives or at most about 1 ms has passed. Re-arming timer 1 wakes QEMU's
 * main loop (see the quirk above) and restarts its 1 ms period. A byte or a timer expiry
 * between the caller's check and the WFI leaves its interrupt pending, so WFI returns at
 * once: no lost wake-up. */
static void sleep_briefly(void)
{
    ZO_TIMER_RELOAD(ZO_TIMER1_BASE) = ZO_WAKE_TIMER_TICKS;
    __asm__ volatile("dsb\n\twfi" ::: "memory");
    ZO_TIMER_INTCLR(ZO_TIMER1_BASE) = 1u; /* the line first, then the NVIC's pending bit */
    ZO_REG32(ZO_NVIC_ICPR0) = 1u << ZO_TIMER1_IRQ;
}

int platform_read_byte(uint8_t *byte, uint32_t timeout_ms)
{
    /* Whole milliseconds are counted off timer 0 one by one, so any timeout_ms works although
     * 32 bits of 25 MHz ticks wrap after 172 s. */
    uint32_t start = timer0_ticks();
    uint32_t waited_ms = 0u;
    while ((ZO_UART_STATE(ZO_UART0_BASE) & ZO_UART_STATE_RXFULL) == 0u) {
        while (timer0_ticks() - start >= ZO_TICKS_PER_MS) {
            start += ZO_TICKS_PER_MS;
            waited_ms++;
        }
        if (waited_ms >= timeout_ms) {
            return 0;
        }
        sleep_briefly();
    }
    *byte = (uint8_t)ZO_UART_DATA(ZO_UART0_BASE);
    ZO_UART_INTCLR(ZO_UART0_BASE) = ZO_UART_INT_RX;
    ZO_REG32(ZO_NVIC_ICPR0) = 1u << ZO_UART0_RX_IRQ;
    return 1;
}

void platform_read(uint8_t *dst, uint32_t n)
{
    uint32_t i;
    for (i = 0u; i < n; i++) {
        while (!platform_read_byte(&dst[i], 0xFFFFFFFFu)) {
        }
    }
}

void platform_write(const uint8_t *src, uint32_t n)
{
    uint32_t i;
    for (i = 0u; i < n; i++) {
        while ((ZO_UART_STATE(ZO_UART0_BASE) & ZO_UART_STATE_TXFULL) != 0u) {
        }
        ZO_UART_DATA(ZO_UART0_BASE) = src[i];
    }
}

uint32_t platform_cycles(void)
{
    return timer0_ticks() * ZO_INSNS_PER_TICK;
}

uint32_t platform_cycles_per_second(void)
{
    /* instructions per second of virtual time under -icount shift=0 (nanoseconds without) */
    return ZO_INSNS_PER_SECOND;
}

const char *platform_name(void)
{
    return "qemu";
}

void platform_exit(int status)
{
    /* SYS_EXIT_EXTENDED takes {reason, subcode}; with ApplicationExit QEMU exits with
     * status = subcode (the host OS keeps its low 8 bits). */
    uint32_t block[2];
    block[0] = ZO_ADP_STOPPED_APPLICATION_EXIT;
    block[1] = (uint32_t)status;
    (void)zo_semihost(ZO_SH_SYS_EXIT_EXTENDED, (uintptr_t)block);
    /* Only reached on a debugger without SYS_EXIT_EXTENDED: plain SYS_EXIT can only say
     * "success" or "failure" (QEMU maps these to 0 and 1). */
    (void)zo_semihost(ZO_SH_SYS_EXIT, status == 0 ? ZO_ADP_STOPPED_APPLICATION_EXIT
                                                  : ZO_ADP_STOPPED_RUNTIME_ERROR_UNKNOWN);
    for (;;) {
    }
}
