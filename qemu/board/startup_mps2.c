/* startup_mps2.c - reset and exception handling for QEMU's mps2-an500 (Cortex-M7).
 *
 * The vector table sits in section .isr_vector, which the linker script places at the code
 * memory origin 0x00000000 (where the core fetches the initial SP and the reset vector;
 * VTOR resets to 0). Reset_Handler enables the FPU, copies .data from flash, zeroes .bss,
 * runs any constructors and calls main(); if main returns, its value is the exit status.
 *
 * Every other exception (faults, and interrupts nobody enabled) ends the program through
 * semihosting with exit status ZO_FAULT_EXIT_BASE + exception number (HardFault: 103;
 * faults escalate to HardFault because SHCSR enables none of MemManage/BusFault/UsageFault)
 * after printing one line with the faulting PC and the fault status registers to the
 * semihosting console (QEMU's stderr), never to UART0, whose byte stream belongs to the host
 * protocol. So a crash never hangs a test.
 *
 * System register addresses: ARMv7-M Architecture Reference Manual (DDI 0403E), System
 * Control Block: VTOR 0xE000ED08, CFSR 0xE000ED28, HFSR 0xE000ED2C, MMFAR 0xE000ED34,
 * BFAR 0xE000ED38, CPACR 0xE000ED88. Exception numbers: 2 NMI, 3 HardFault, 4 MemManage,
 * 5 BusFault, 6 UsageFault, 11 SVCall, 12 DebugMonitor, 14 PendSV, 15 SysTick, 16+n IRQ n.
 */
#include <stdint.h>

#include "platform.h"

#define ZO_FAULT_EXIT_BASE 100
#define ZO_NUM_IRQS 32 /* the AN500 NVIC has 32 external interrupts (QEMU: num-irq 32) */

#define ZO_REG32(addr) (*(volatile uint32_t *)(uintptr_t)(addr))
#define ZO_SCB_VTOR 0xE000ED08u
#define ZO_SCB_CFSR 0xE000ED28u
#define ZO_SCB_HFSR 0xE000ED2Cu
#define ZO_SCB_MMFAR 0xE000ED34u
#define ZO_SCB_BFAR 0xE000ED38u
#define ZO_SCB_CPACR 0xE000ED88u
#define ZO_CPACR_CP10_CP11_FULL (0xFu << 20)

#define ZO_SH_SYS_WRITE0 0x04u

/* Linker script symbols (see mps2_an500.ld). */
extern uint32_t _sidata[];
extern uint32_t _sdata[];
extern uint32_t _edata[];
extern uint32_t _sbss[];
extern uint32_t _ebss[];
extern uint32_t _estack[];
extern void (*__preinit_array_start[])(void);
extern void (*__preinit_array_end[])(void);
extern void (*__init_array_start[])(void);
extern void (*__init_array_end[])(void);

int main(void);

void Reset_Handler(void);
void ZO_Exception_Handler(void);
void zo_fault_report(const uint32_t *frame, uint32_t exc_return);

typedef union {
    void (*handler)(void);
    uint32_t *stack_top;
} zo_vector;

#define ZO_X ZO_Exception_Handler

__attribute__((section(".isr_vector"), used)) const zo_vector zo_vector_table[16 + ZO_NUM_IRQS] = {
    {.stack_top = _estack}, /* 0: initial main stack pointer */
    {.handler = Reset_Handler}, /* 1: reset */
    {.handler = ZO_X}, /* 2: NMI */
    {.handler = ZO_X}, /* 3: HardFault */
    {.handler = ZO_X}, /* 4: MemManage */
    {.handler = ZO_X}, /* 5: BusFault */
    {.handler = ZO_X}, /* 6: UsageFault */
    {.handler = 0},    /* 7-10: reserved */
    {.handler = 0},
    {.handler = 0},
    {.handler = 0},
    {.handler = ZO_X}, /* 11: SVCall */
    {.handler = ZO_X}, /* 12: DebugMonitor */
    {.handler = 0},    /* 13: reserved */
    {.handler = ZO_X}, /* 14: PendSV */
    {.handler = ZO_X}, /* 15: SysTick */
    /* 16..47: external interrupts 0..31 (none is enabled by zocodegen firmware) */
    {.handler = ZO_X}, {.handler = ZO_X}, {.handler = ZO_X}, {.handler = ZO_X},
    {.handler = ZO_X}, {.handler = ZO_X}, {.handler = ZO_X}, {.handler = ZO_X},
    {.handler = ZO_X}, {.handler = ZO_X}, {.handler = ZO_X}, {.handler = ZO_X},
    {.handler = ZO_X}, {.handler = ZO_X}, {.handler = ZO_X}, {.handler = ZO_X},
    {.handler = ZO_X}, {.handler = ZO_X}, {.handler = ZO_X}, {.handler = ZO_X},
    {.handler = ZO_X}, {.handler = ZO_X}, {.handler = ZO_X}, {.handler = ZO_X},
    {.handler = ZO_X}, {.handler = ZO_X}, {.handler = ZO_X}, {.handler = ZO_X},
    {.handler = ZO_X}, {.handler = ZO_X}, {.handler = ZO_X}, {.handler = ZO_X},
};

void Reset_Handler(void)
{
    uint32_t *src;
    uint32_t *dst;
    void (**fn)(void);

#ifdef __ARM_FP
    /* FPU first, before any code that the compiler may give FP/SIMD registers to:
     * CP10 and CP11 full access, then DSB + ISB so the next instruction sees it. A
     * soft-float build (-mfloat-abi=soft, the integer-only check of --estimator int8)
     * leaves the FPU off, so that any FP instruction would fault. */
    ZO_REG32(ZO_SCB_CPACR) |= ZO_CPACR_CP10_CP11_FULL;
    __asm__ volatile("dsb\n\tisb" ::: "memory");
#endif

    ZO_REG32(ZO_SCB_VTOR) = (uint32_t)(uintptr_t)zo_vector_table;

    for (src = _sidata, dst = _sdata; dst < _edata;) {
        *dst++ = *src++;
    }
    for (dst = _sbss; dst < _ebss;) {
        *dst++ = 0u;
    }
    for (fn = __preinit_array_start; fn < __preinit_array_end; fn++) {
        (*fn)();
    }
    for (fn = __init_array_start; fn < __init_array_end; fn++) {
        (*fn)();
    }

    platform_exit(main());
}

/* Finds the stacked exception frame (MSP or PSP, EXC_RETURN bit 2) and hands it to C. */
__attribute__((naked)) void ZO_Exception_Handler(void)
{
    __asm__ volatile(
        "tst lr, #4\n\t"
        "ite eq\n\t"
        "mrseq r0, msp\n\t"
        "mrsne r0, psp\n\t"
        "mov r1, lr\n\t"
        "b zo_fault_report\n\t");
}

static char *zo_put_str(char *p, const char *s)
{
    while (*s != '\0') {
        *p++ = *s++;
    }
    return p;
}

static char *zo_put_hex(char *p, uint32_t v)
{
    static const char digits[] = "0123456789abcdef";
    int shift;
    *p++ = '0';
    *p++ = 'x';
    for (shift = 28; shift >= 0; shift -= 4) {
        *p++ = digits[(v >> (uint32_t)shift) & 0xFu];
    }
    return p;
}

static char *zo_put_dec(char *p, uint32_t v)
{
    char tmp[10];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + (v % 10u));
        v /= 10u;
    } while (v != 0u);
    while (n > 0) {
        *p++ = tmp[--n];
    }
    return p;
}

static const char *zo_exception_name(uint32_t n)
{
    switch (n) {
    case 2u: return "NMI";
    case 3u: return "HardFault";
    case 4u: return "MemManage";
    case 5u: return "BusFault";
    case 6u: return "UsageFault";
    case 11u: return "SVCall";
    case 12u: return "DebugMonitor";
    case 14u: return "PendSV";
    case 15u: return "SysTick";
    default: return "IRQ";
    }
}

__attribute__((used, noreturn)) void zo_fault_report(const uint32_t *frame, uint32_t exc_return)
{
    char line[256];
    char *p = line;
    uint32_t ipsr;
    uint32_t frame_addr = (uint32_t)(uintptr_t)frame;
    int status;

    __asm__ volatile("mrs %0, ipsr" : "=r"(ipsr));
    ipsr &= 0x1FFu;
    status = ZO_FAULT_EXIT_BASE + (int)ipsr;

    p = zo_put_str(p, "zocodegen: fatal exception ");
    p = zo_put_dec(p, ipsr);
    p = zo_put_str(p, " (");
    p = zo_put_str(p, zo_exception_name(ipsr));
    p = zo_put_str(p, ")");
    /* Only trust the stacked frame if it lies in the AN500 SRAM (0x20000000, 4 MiB). */
    if (frame_addr >= 0x20000000u && frame_addr <= 0x20400000u - 32u && (frame_addr & 3u) == 0u) {
        p = zo_put_str(p, " pc=");
        p = zo_put_hex(p, frame[6]);
        p = zo_put_str(p, " lr=");
        p = zo_put_hex(p, frame[5]);
    }
    p = zo_put_str(p, " exc_return=");
    p = zo_put_hex(p, exc_return);
    p = zo_put_str(p, " cfsr=");
    p = zo_put_hex(p, ZO_REG32(ZO_SCB_CFSR));
    p = zo_put_str(p, " hfsr=");
    p = zo_put_hex(p, ZO_REG32(ZO_SCB_HFSR));
    p = zo_put_str(p, " mmfar=");
    p = zo_put_hex(p, ZO_REG32(ZO_SCB_MMFAR));
    p = zo_put_str(p, " bfar=");
    p = zo_put_hex(p, ZO_REG32(ZO_SCB_BFAR));
    p = zo_put_str(p, "; exit status ");
    p = zo_put_dec(p, (uint32_t)status);
    *p++ = '\n';
    *p = '\0';

    {
        register uint32_t r0 __asm__("r0") = ZO_SH_SYS_WRITE0;
        register const char *r1 __asm__("r1") = line;
        __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    }
    platform_exit(status);
}
