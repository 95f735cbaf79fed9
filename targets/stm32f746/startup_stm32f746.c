/*
 * Reset handler and vector table: STM32F746NG on the 32F746GDISCOVERY kit (zocodegen).
 *
 * Vector table layout
 *   words 0..15  initial MSP and the Cortex-M7 system exceptions (ARMv7-M Architecture
 *                Reference Manual, DDI 0403E, B1.5.2 "Exception number definition")
 *   words 16..   the 98 device interrupt positions 0..97 of RM0385 (rev 8) section 10.1.2
 *                "Interrupt and exception vectors" (WWDG at 0 ... SPDIF_RX at 97).
 *                Position 79 is CRYP, which exists only on the STM32F756: reserved (0) here.
 * Every handler is a weak alias of Default_Handler: a driver overrides one by defining a
 * function of the same name. The table goes to section .isr_vector, which the linker script
 * places at the flash origin 0x08000000 (RM0385 section 2.2.2 memory map).
 *
 * Reset_Handler is shared by both boards: ../common/reset_cortex_m7.c.
 */
#include <stdint.h>

#include "startup_cortex_m7.h"

#define ZO_IRQ_COUNT 98u          /* RM0385 section 10.1.2: positions 0..97 */
#define ZO_IRQ(n) (16u + (n))      /* device interrupt n lives at word 16 + n */

#define ZO_WEAK_DEFAULT __attribute__((weak, alias("Default_Handler")))

/* Cortex-M7 system exceptions. */
void NMI_Handler(void) ZO_WEAK_DEFAULT;
void HardFault_Handler(void) ZO_WEAK_DEFAULT;
void MemManage_Handler(void) ZO_WEAK_DEFAULT;
void BusFault_Handler(void) ZO_WEAK_DEFAULT;
void UsageFault_Handler(void) ZO_WEAK_DEFAULT;
void SVC_Handler(void) ZO_WEAK_DEFAULT;
void DebugMon_Handler(void) ZO_WEAK_DEFAULT;
void PendSV_Handler(void) ZO_WEAK_DEFAULT;
void SysTick_Handler(void) ZO_WEAK_DEFAULT;

/* Device interrupts, RM0385 section 10.1.2 (names follow the reference manual's acronyms). */
void WWDG_IRQHandler(void) ZO_WEAK_DEFAULT;
void PVD_IRQHandler(void) ZO_WEAK_DEFAULT;
void TAMP_STAMP_IRQHandler(void) ZO_WEAK_DEFAULT;
void RTC_WKUP_IRQHandler(void) ZO_WEAK_DEFAULT;
void FLASH_IRQHandler(void) ZO_WEAK_DEFAULT;
void RCC_IRQHandler(void) ZO_WEAK_DEFAULT;
void EXTI0_IRQHandler(void) ZO_WEAK_DEFAULT;
void EXTI1_IRQHandler(void) ZO_WEAK_DEFAULT;
void EXTI2_IRQHandler(void) ZO_WEAK_DEFAULT;
void EXTI3_IRQHandler(void) ZO_WEAK_DEFAULT;
void EXTI4_IRQHandler(void) ZO_WEAK_DEFAULT;
void DMA1_Stream0_IRQHandler(void) ZO_WEAK_DEFAULT;
void DMA1_Stream1_IRQHandler(void) ZO_WEAK_DEFAULT;
void DMA1_Stream2_IRQHandler(void) ZO_WEAK_DEFAULT;
void DMA1_Stream3_IRQHandler(void) ZO_WEAK_DEFAULT;
void DMA1_Stream4_IRQHandler(void) ZO_WEAK_DEFAULT;
void DMA1_Stream5_IRQHandler(void) ZO_WEAK_DEFAULT;
void DMA1_Stream6_IRQHandler(void) ZO_WEAK_DEFAULT;
void ADC_IRQHandler(void) ZO_WEAK_DEFAULT;
void CAN1_TX_IRQHandler(void) ZO_WEAK_DEFAULT;
void CAN1_RX0_IRQHandler(void) ZO_WEAK_DEFAULT;
void CAN1_RX1_IRQHandler(void) ZO_WEAK_DEFAULT;
void CAN1_SCE_IRQHandler(void) ZO_WEAK_DEFAULT;
void EXTI9_5_IRQHandler(void) ZO_WEAK_DEFAULT;
void TIM1_BRK_TIM9_IRQHandler(void) ZO_WEAK_DEFAULT;
void TIM1_UP_TIM10_IRQHandler(void) ZO_WEAK_DEFAULT;
void TIM1_TRG_COM_TIM11_IRQHandler(void) ZO_WEAK_DEFAULT;
void TIM1_CC_IRQHandler(void) ZO_WEAK_DEFAULT;
void TIM2_IRQHandler(void) ZO_WEAK_DEFAULT;
void TIM3_IRQHandler(void) ZO_WEAK_DEFAULT;
void TIM4_IRQHandler(void) ZO_WEAK_DEFAULT;
void I2C1_EV_IRQHandler(void) ZO_WEAK_DEFAULT;
void I2C1_ER_IRQHandler(void) ZO_WEAK_DEFAULT;
void I2C2_EV_IRQHandler(void) ZO_WEAK_DEFAULT;
void I2C2_ER_IRQHandler(void) ZO_WEAK_DEFAULT;
void SPI1_IRQHandler(void) ZO_WEAK_DEFAULT;
void SPI2_IRQHandler(void) ZO_WEAK_DEFAULT;
void USART1_IRQHandler(void) ZO_WEAK_DEFAULT;
void USART2_IRQHandler(void) ZO_WEAK_DEFAULT;
void USART3_IRQHandler(void) ZO_WEAK_DEFAULT;
void EXTI15_10_IRQHandler(void) ZO_WEAK_DEFAULT;
void RTC_Alarm_IRQHandler(void) ZO_WEAK_DEFAULT;
void OTG_FS_WKUP_IRQHandler(void) ZO_WEAK_DEFAULT;
void TIM8_BRK_TIM12_IRQHandler(void) ZO_WEAK_DEFAULT;
void TIM8_UP_TIM13_IRQHandler(void) ZO_WEAK_DEFAULT;
void TIM8_TRG_COM_TIM14_IRQHandler(void) ZO_WEAK_DEFAULT;
void TIM8_CC_IRQHandler(void) ZO_WEAK_DEFAULT;
void DMA1_Stream7_IRQHandler(void) ZO_WEAK_DEFAULT;
void FMC_IRQHandler(void) ZO_WEAK_DEFAULT;
void SDMMC1_IRQHandler(void) ZO_WEAK_DEFAULT;
void TIM5_IRQHandler(void) ZO_WEAK_DEFAULT;
void SPI3_IRQHandler(void) ZO_WEAK_DEFAULT;
void UART4_IRQHandler(void) ZO_WEAK_DEFAULT;
void UART5_IRQHandler(void) ZO_WEAK_DEFAULT;
void TIM6_DAC_IRQHandler(void) ZO_WEAK_DEFAULT;
void TIM7_IRQHandler(void) ZO_WEAK_DEFAULT;
void DMA2_Stream0_IRQHandler(void) ZO_WEAK_DEFAULT;
void DMA2_Stream1_IRQHandler(void) ZO_WEAK_DEFAULT;
void DMA2_Stream2_IRQHandler(void) ZO_WEAK_DEFAULT;
void DMA2_Stream3_IRQHandler(void) ZO_WEAK_DEFAULT;
void DMA2_Stream4_IRQHandler(void) ZO_WEAK_DEFAULT;
void ETH_IRQHandler(void) ZO_WEAK_DEFAULT;
void ETH_WKUP_IRQHandler(void) ZO_WEAK_DEFAULT;
void CAN2_TX_IRQHandler(void) ZO_WEAK_DEFAULT;
void CAN2_RX0_IRQHandler(void) ZO_WEAK_DEFAULT;
void CAN2_RX1_IRQHandler(void) ZO_WEAK_DEFAULT;
void CAN2_SCE_IRQHandler(void) ZO_WEAK_DEFAULT;
void OTG_FS_IRQHandler(void) ZO_WEAK_DEFAULT;
void DMA2_Stream5_IRQHandler(void) ZO_WEAK_DEFAULT;
void DMA2_Stream6_IRQHandler(void) ZO_WEAK_DEFAULT;
void DMA2_Stream7_IRQHandler(void) ZO_WEAK_DEFAULT;
void USART6_IRQHandler(void) ZO_WEAK_DEFAULT;
void I2C3_EV_IRQHandler(void) ZO_WEAK_DEFAULT;
void I2C3_ER_IRQHandler(void) ZO_WEAK_DEFAULT;
void OTG_HS_EP1_OUT_IRQHandler(void) ZO_WEAK_DEFAULT;
void OTG_HS_EP1_IN_IRQHandler(void) ZO_WEAK_DEFAULT;
void OTG_HS_WKUP_IRQHandler(void) ZO_WEAK_DEFAULT;
void OTG_HS_IRQHandler(void) ZO_WEAK_DEFAULT;
void DCMI_IRQHandler(void) ZO_WEAK_DEFAULT;
void RNG_IRQHandler(void) ZO_WEAK_DEFAULT;
void FPU_IRQHandler(void) ZO_WEAK_DEFAULT;
void UART7_IRQHandler(void) ZO_WEAK_DEFAULT;
void UART8_IRQHandler(void) ZO_WEAK_DEFAULT;
void SPI4_IRQHandler(void) ZO_WEAK_DEFAULT;
void SPI5_IRQHandler(void) ZO_WEAK_DEFAULT;
void SPI6_IRQHandler(void) ZO_WEAK_DEFAULT;
void SAI1_IRQHandler(void) ZO_WEAK_DEFAULT;
void LTDC_IRQHandler(void) ZO_WEAK_DEFAULT;
void LTDC_ER_IRQHandler(void) ZO_WEAK_DEFAULT;
void DMA2D_IRQHandler(void) ZO_WEAK_DEFAULT;
void SAI2_IRQHandler(void) ZO_WEAK_DEFAULT;
void QUADSPI_IRQHandler(void) ZO_WEAK_DEFAULT;
void LPTIM1_IRQHandler(void) ZO_WEAK_DEFAULT;
void CEC_IRQHandler(void) ZO_WEAK_DEFAULT;
void I2C4_EV_IRQHandler(void) ZO_WEAK_DEFAULT;
void I2C4_ER_IRQHandler(void) ZO_WEAK_DEFAULT;
void SPDIF_RX_IRQHandler(void) ZO_WEAK_DEFAULT;

__attribute__((section(".isr_vector"), used))
const zo_vector zo_vector_table[ZO_IRQ(ZO_IRQ_COUNT)] = {
    [0] = { .stack_top = _estack },
    [1] = { .handler = Reset_Handler },
    [2] = { .handler = NMI_Handler },
    [3] = { .handler = HardFault_Handler },
    [4] = { .handler = MemManage_Handler },
    [5] = { .handler = BusFault_Handler },
    [6] = { .handler = UsageFault_Handler },
    /* 7..10 reserved */
    [11] = { .handler = SVC_Handler },
    [12] = { .handler = DebugMon_Handler },
    /* 13 reserved */
    [14] = { .handler = PendSV_Handler },
    [15] = { .handler = SysTick_Handler },
    [ZO_IRQ(0)] = { .handler = WWDG_IRQHandler },
    [ZO_IRQ(1)] = { .handler = PVD_IRQHandler },
    [ZO_IRQ(2)] = { .handler = TAMP_STAMP_IRQHandler },
    [ZO_IRQ(3)] = { .handler = RTC_WKUP_IRQHandler },
    [ZO_IRQ(4)] = { .handler = FLASH_IRQHandler },
    [ZO_IRQ(5)] = { .handler = RCC_IRQHandler },
    [ZO_IRQ(6)] = { .handler = EXTI0_IRQHandler },
    [ZO_IRQ(7)] = { .handler = EXTI1_IRQHandler },
    [ZO_IRQ(8)] = { .handler = EXTI2_IRQHandler },
    [ZO_IRQ(9)] = { .handler = EXTI3_IRQHandler },
    [ZO_IRQ(10)] = { .handler = EXTI4_IRQHandler },
    [ZO_IRQ(11)] = { .handler = DMA1_Stream0_IRQHandler },
    [ZO_IRQ(12)] = { .handler = DMA1_Stream1_IRQHandler },
    [ZO_IRQ(13)] = { .handler = DMA1_Stream2_IRQHandler },
    [ZO_IRQ(14)] = { .handler = DMA1_Stream3_IRQHandler },
    [ZO_IRQ(15)] = { .handler = DMA1_Stream4_IRQHandler },
    [ZO_IRQ(16)] = { .handler = DMA1_Stream5_IRQHandler },
    [ZO_IRQ(17)] = { .handler = DMA1_Stream6_IRQHandler },
    [ZO_IRQ(18)] = { .handler = ADC_IRQHandler },
    [ZO_IRQ(19)] = { .handler = CAN1_TX_IRQHandler },
    [ZO_IRQ(20)] = { .handler = CAN1_RX0_IRQHandler },
    [ZO_IRQ(21)] = { .handler = CAN1_RX1_IRQHandler },
    [ZO_IRQ(22)] = { .handler = CAN1_SCE_IRQHandler },
    [ZO_IRQ(23)] = { .handler = EXTI9_5_IRQHandler },
    [ZO_IRQ(24)] = { .handler = TIM1_BRK_TIM9_IRQHandler },
    [ZO_IRQ(25)] = { .handler = TIM1_UP_TIM10_IRQHandler },
    [ZO_IRQ(26)] = { .handler = TIM1_TRG_COM_TIM11_IRQHandler },
    [ZO_IRQ(27)] = { .handler = TIM1_CC_IRQHandler },
    [ZO_IRQ(28)] = { .handler = TIM2_IRQHandler },
    [ZO_IRQ(29)] = { .handler = TIM3_IRQHandler },
    [ZO_IRQ(30)] = { .handler = TIM4_IRQHandler },
    [ZO_IRQ(31)] = { .handler = I2C1_EV_IRQHandler },
    [ZO_IRQ(32)] = { .handler = I2C1_ER_IRQHandler },
    [ZO_IRQ(33)] = { .handler = I2C2_EV_IRQHandler },
    [ZO_IRQ(34)] = { .handler = I2C2_ER_IRQHandler },
    [ZO_IRQ(35)] = { .handler = SPI1_IRQHandler },
    [ZO_IRQ(36)] = { .handler = SPI2_IRQHandler },
    [ZO_IRQ(37)] = { .handler = USART1_IRQHandler },
    [ZO_IRQ(38)] = { .handler = USART2_IRQHandler },
    [ZO_IRQ(39)] = { .handler = USART3_IRQHandler },
    [ZO_IRQ(40)] = { .handler = EXTI15_10_IRQHandler },
    [ZO_IRQ(41)] = { .handler = RTC_Alarm_IRQHandler },
    [ZO_IRQ(42)] = { .handler = OTG_FS_WKUP_IRQHandler },
    [ZO_IRQ(43)] = { .handler = TIM8_BRK_TIM12_IRQHandler },
    [ZO_IRQ(44)] = { .handler = TIM8_UP_TIM13_IRQHandler },
    [ZO_IRQ(45)] = { .handler = TIM8_TRG_COM_TIM14_IRQHandler },
    [ZO_IRQ(46)] = { .handler = TIM8_CC_IRQHandler },
    [ZO_IRQ(47)] = { .handler = DMA1_Stream7_IRQHandler },
    [ZO_IRQ(48)] = { .handler = FMC_IRQHandler },
    [ZO_IRQ(49)] = { .handler = SDMMC1_IRQHandler },
    [ZO_IRQ(50)] = { .handler = TIM5_IRQHandler },
    [ZO_IRQ(51)] = { .handler = SPI3_IRQHandler },
    [ZO_IRQ(52)] = { .handler = UART4_IRQHandler },
    [ZO_IRQ(53)] = { .handler = UART5_IRQHandler },
    [ZO_IRQ(54)] = { .handler = TIM6_DAC_IRQHandler },
    [ZO_IRQ(55)] = { .handler = TIM7_IRQHandler },
    [ZO_IRQ(56)] = { .handler = DMA2_Stream0_IRQHandler },
    [ZO_IRQ(57)] = { .handler = DMA2_Stream1_IRQHandler },
    [ZO_IRQ(58)] = { .handler = DMA2_Stream2_IRQHandler },
    [ZO_IRQ(59)] = { .handler = DMA2_Stream3_IRQHandler },
    [ZO_IRQ(60)] = { .handler = DMA2_Stream4_IRQHandler },
    [ZO_IRQ(61)] = { .handler = ETH_IRQHandler },
    [ZO_IRQ(62)] = { .handler = ETH_WKUP_IRQHandler },
    [ZO_IRQ(63)] = { .handler = CAN2_TX_IRQHandler },
    [ZO_IRQ(64)] = { .handler = CAN2_RX0_IRQHandler },
    [ZO_IRQ(65)] = { .handler = CAN2_RX1_IRQHandler },
    [ZO_IRQ(66)] = { .handler = CAN2_SCE_IRQHandler },
    [ZO_IRQ(67)] = { .handler = OTG_FS_IRQHandler },
    [ZO_IRQ(68)] = { .handler = DMA2_Stream5_IRQHandler },
    [ZO_IRQ(69)] = { .handler = DMA2_Stream6_IRQHandler },
    [ZO_IRQ(70)] = { .handler = DMA2_Stream7_IRQHandler },
    [ZO_IRQ(71)] = { .handler = USART6_IRQHandler },
    [ZO_IRQ(72)] = { .handler = I2C3_EV_IRQHandler },
    [ZO_IRQ(73)] = { .handler = I2C3_ER_IRQHandler },
    [ZO_IRQ(74)] = { .handler = OTG_HS_EP1_OUT_IRQHandler },
    [ZO_IRQ(75)] = { .handler = OTG_HS_EP1_IN_IRQHandler },
    [ZO_IRQ(76)] = { .handler = OTG_HS_WKUP_IRQHandler },
    [ZO_IRQ(77)] = { .handler = OTG_HS_IRQHandler },
    [ZO_IRQ(78)] = { .handler = DCMI_IRQHandler },
    [ZO_IRQ(80)] = { .handler = RNG_IRQHandler },
    [ZO_IRQ(81)] = { .handler = FPU_IRQHandler },
    [ZO_IRQ(82)] = { .handler = UART7_IRQHandler },
    [ZO_IRQ(83)] = { .handler = UART8_IRQHandler },
    [ZO_IRQ(84)] = { .handler = SPI4_IRQHandler },
    [ZO_IRQ(85)] = { .handler = SPI5_IRQHandler },
    [ZO_IRQ(86)] = { .handler = SPI6_IRQHandler },
    [ZO_IRQ(87)] = { .handler = SAI1_IRQHandler },
    [ZO_IRQ(88)] = { .handler = LTDC_IRQHandler },
    [ZO_IRQ(89)] = { .handler = LTDC_ER_IRQHandler },
    [ZO_IRQ(90)] = { .handler = DMA2D_IRQHandler },
    [ZO_IRQ(91)] = { .handler = SAI2_IRQHandler },
    [ZO_IRQ(92)] = { .handler = QUADSPI_IRQHandler },
    [ZO_IRQ(93)] = { .handler = LPTIM1_IRQHandler },
    [ZO_IRQ(94)] = { .handler = CEC_IRQHandler },
    [ZO_IRQ(95)] = { .handler = I2C4_EV_IRQHandler },
    [ZO_IRQ(96)] = { .handler = I2C4_ER_IRQHandler },
    [ZO_IRQ(97)] = { .handler = SPDIF_RX_IRQHandler },
};

/* The weak aliases above need their target in this translation unit. */
void Default_Handler(void)
{
    /* Unexpected exception or interrupt: stop here (a debugger shows the active vector in
     * the IPSR). */
    for (;;) {
    }
}
