/*
 * sdmmc_board.h - the microSD slot of the STM32H7B3I-DK for blockdev_sdmmc.c (zocodegen,
 * docs/sdcard.md "The driver"). Included by targets/common/blockdev_sdmmc.c only, after
 * SD_REG32() and sd_wait_any(); compiled into `--data-source sdcard` builds only.
 *
 * Slot: UM2569 (STM32H7B3I-DK user manual), "microSD card" section: SDMMC1 with D0..D3 =
 * PC8..PC11, CK = PC12, CMD = PD2, alternate function AF12 (DS13139 alternate function
 * table); the card-detect switch on PI8, closing to ground with a card in (low = present,
 * pull-up needed), as ST's board support package for this kit also has it
 * (STM32CubeH7 Drivers/BSP/STM32H7B3I-DK/stm32h7b3i_discovery_sd.h: SD_DETECT_PIN 8, GPIOI).
 *
 * Peripheral: SDMMC v2 (RM0455 rev 10, chapter "Secure digital input/output MultiMediaCard
 * interface (SDMMC)", register map at its end), SDMMC1 base 0x52007000 on the CD domain's AHB3
 * (RM0455 memory map), clock enable RCC_AHB3ENR SDMMC1EN bit 16. What differs from v1: the
 * command register has CMDTRANS (bit 6: the command starts the data path) and CMDSTOP (bit 7:
 * CMD12 aborts it), WAITRESP moves to 9:8 and gains "short, no CRC" (10) for R3, CPSMEN moves
 * to bit 12; DCTRL DTEN is not used with SD memory cards; CLKCR has no CLKEN (the clock runs
 * while POWER = on) and SDMMC_CK = SDMMCCLK / (2 * CLKDIV) (CLKDIV 9:0, 0 = bypass). The
 * internal DMA (IDMACTRL) stays off: the FIFO is polled.
 *
 * Kernel clock: RCC_CDCCIPR (offset 0x4C) SDMMCSEL bit 16: 0 = pll1_q_ck, 1 = pll2_r_ck.
 * board.h's clock_init() leaves PLL1's Q output at its reset /2 = 280 MHz, above what the
 * SDMMC needs, and PLL1 must stay as it is for the link build; PLL2 is unused, so the driver
 * starts it here: reference 2 MHz (HSE 24 MHz / DIVM2 12, or HSI 64 MHz / 32), PLL2RGE 2-4 MHz,
 * wide VCO x200 = 400 MHz (128-560 MHz), DIVR2 /4 = 100 MHz (target.json "sdmmc"). SDMMC_CK:
 * 100 MHz / (2 * 125) = 400 kHz while identifying, / (2 * 2) = 25 MHz afterwards (default
 * speed; SD Physical Layer Simplified Specification, fOD and fPP).
 */
#ifndef ZO_SDMMC_BOARD_STM32H7B3_H
#define ZO_SDMMC_BOARD_STM32H7B3_H

#define SDMMC_BASE            0x52007000u
#define SDMMC_BOARD_NAME      "SDMMC1 (RM0455, v2)"

/* CLKCR: CLKDIV 9:0, PWRSAV 12, WIDBUS 15:14, NEGEDGE 16, HWFC_EN 17, DDR 18, BUSSPEED 19. */
#define SDMMC_CLKCR_ON        0u          /* no CLKEN: SDMMC_CK runs while powered on */
#define SDMMC_CLKCR_WIDBUS_4  (1u << 14)  /* WIDBUS = 01: 4-bit bus */
#define SDMMC_CLKCR_HWFC      (1u << 17)
#define SDMMC_CLKDIV_MAX      0x3FFu

/* CMD: CMDINDEX 5:0, CMDTRANS 6, CMDSTOP 7, WAITRESP 9:8 (00 none, 01 short, 10 short
 * without CRC, 11 long), WAITINT 10, WAITPEND 11, CPSMEN 12. */
#define SDMMC_CMD_WAITRESP_POS 8u
#define SDMMC_CMD_CPSMEN      (1u << 12)
#define SDMMC_CMD_TRANS       (1u << 6)
#define SDMMC_CMD_STOP        (1u << 7)
#define SDMMC_RESP_NOCRC      2u          /* R3 (ACMD41) carries no CRC */

/* DCTRL: DTEN 0 (not for SD memory: CMDTRANS starts the DPSM), DTDIR 1, DTMODE 3:2,
 * DBLOCKSIZE 7:4, FIFORST 13. */
#define SDMMC_DCTRL_START     0u

/* ICR: every static flag (bits 0-11, BUSYD0ENDC 21 .. IDMABTCC 28). */
#define SDMMC_ICR_ALL         0x1FE00FFFu

/* ---- pins (UM2569; GPIO registers RM0455, GPIOA..K from 0x58020000 every 0x400) -------- */

#define SDMMC_GPIO_DATA       0x58020800u /* GPIOC: D0..D3 = PC8..PC11, CK = PC12 */
#define SDMMC_GPIO_CMD        0x58020C00u /* GPIOD: CMD = PD2 */
#define SDMMC_CMD_PIN         2u
#define SDMMC_DETECT_PORT     0x58022000u /* GPIOI */
#define SDMMC_DETECT_PIN      8u          /* uSD detect, low = card present */
#define SDMMC_AF              12u         /* AF12 = SDMMC1 (DS13139) */

/* ---- RCC (RM0455 "RCC register description", base 0x58024400) -------------------------- */

#define SD_RCC_CR             SD_REG32(0x58024400u)
#define SD_RCC_PLLCKSELR      SD_REG32(0x58024428u) /* PLLSRC 1:0, DIVM2 17:12 */
#define SD_RCC_PLLCFGR        SD_REG32(0x5802442Cu) /* PLL2FRACEN 4, PLL2VCOSEL 5, PLL2RGE 7:6,
                                                     * DIVR2EN 21 */
#define SD_RCC_PLL2DIVR       SD_REG32(0x58024438u) /* N2 8:0, P2 15:9, Q2 22:16, R2 30:24
                                                     * (each the divider - 1) */
#define SD_RCC_CDCCIPR        SD_REG32(0x5802444Cu) /* SDMMCSEL 16 */
#define SD_RCC_AHB3ENR        SD_REG32(0x580244D4u) /* SDMMC1EN 16 */
#define SD_RCC_AHB4ENR        SD_REG32(0x580244E0u) /* GPIOCEN 2, GPIODEN 3, GPIOIEN 8 */
#define SD_RCC_CR_PLL2ON      (1u << 26)
#define SD_RCC_CR_PLL2RDY     (1u << 27)
#define SD_PLL2_REF_HZ        2000000u
#define SD_PLL2_N             200u        /* 400 MHz VCO */
#define SD_PLL2_R             4u          /* pll2_r_ck 100 MHz */
#define SD_PLL2_TIMEOUT_MS    10u         /* it locks in well under 1 ms (DS13139 PLL) */

/* SDMMC_CK = SDMMCCLK / (2 * CLKDIV): the smallest divider that stays at or below max_hz. */
static uint32_t sdmmc_clkdiv(uint32_t kernel_hz, uint32_t max_hz)
{
    uint32_t div = (kernel_hz + 2u * max_hz - 1u) / (2u * max_hz);
    return div < SDMMC_CLKDIV_MAX ? div : SDMMC_CLKDIV_MAX;
}

static uint32_t sdmmc_ck_hz(uint32_t kernel_hz, uint32_t clkdiv)
{
    return clkdiv == 0u ? kernel_hz : kernel_hz / (2u * clkdiv);
}

/* The PLLs' common source (RCC_PLLCKSELR PLLSRC: 00 HSI 64 MHz / HSIDIV, 01 CSI 4 MHz, 10 HSE
 * 24 MHz, UM2569 crystal), 0 for none. */
static uint32_t sd_pll_source_hz(void)
{
    static const uint32_t source[4] = {0u, 4000000u, 24000000u, 0u};
    uint32_t src = SD_RCC_PLLCKSELR & 3u;
    return src == 0u ? 64000000u >> ((SD_RCC_CR >> 3) & 3u) : source[src];
}

/* GPIOC/D/I and SDMMC1 clocks on; SDMMCCLK = pll2_r_ck at 100 MHz, PLL2 started here unless it
 * already runs (a second attach). *kernel_hz: what pll2_r_ck makes. */
static int sdmmc_board_clocks(uint32_t *kernel_hz)
{
    uint32_t source = sd_pll_source_hz();
    SD_RCC_AHB4ENR |= (1u << 2) | (1u << 3) | (1u << 8);
    SD_RCC_AHB3ENR |= 1u << 16;
    (void)SD_RCC_AHB3ENR; /* read back: the clock runs before the first access */
    if (source == 0u || source % SD_PLL2_REF_HZ != 0u) {
        return ZO_BLOCKDEV_ERR_CLOCK;
    }
    if ((SD_RCC_CR & SD_RCC_CR_PLL2ON) == 0u) {
        SD_RCC_PLLCKSELR = (SD_RCC_PLLCKSELR & ~(0x3Fu << 12)) | ((source / SD_PLL2_REF_HZ) << 12);
        SD_RCC_PLLCFGR = (SD_RCC_PLLCFGR & ~((1u << 4) | (1u << 5) | (3u << 6)))
                         | (1u << 6) | (1u << 21); /* 2-4 MHz range, wide VCO, DIVR2EN */
        SD_RCC_PLL2DIVR = (SD_RCC_PLL2DIVR & ~(0x1FFu | (0x7Fu << 24)))
                          | (SD_PLL2_N - 1u) | ((SD_PLL2_R - 1u) << 24);
        SD_RCC_CR |= SD_RCC_CR_PLL2ON;
    }
    if (sd_wait_any(&SD_RCC_CR, SD_RCC_CR_PLL2RDY, SD_PLL2_TIMEOUT_MS) == 0u) {
        return ZO_BLOCKDEV_ERR_CLOCK;
    }
    SD_RCC_CDCCIPR |= 1u << 16; /* SDMMCSEL = pll2_r_ck */
    uint32_t m = (SD_RCC_PLLCKSELR >> 12) & 0x3Fu, divr = SD_RCC_PLL2DIVR;
    *kernel_hz = m != 0u ? source / m * ((divr & 0x1FFu) + 1u) / (((divr >> 24) & 0x7Fu) + 1u)
                         : 0u;
    return *kernel_hz != 0u ? ZO_BLOCKDEV_OK : ZO_BLOCKDEV_ERR_CLOCK;
}

#endif /* ZO_SDMMC_BOARD_STM32H7B3_H */
