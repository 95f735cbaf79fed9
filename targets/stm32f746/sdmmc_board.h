/*
 * sdmmc_board.h - the microSD slot of the 32F746GDISCOVERY for blockdev_sdmmc.c (zocodegen,
 * docs/sdcard.md "The driver"). Included by targets/common/blockdev_sdmmc.c only, after
 * SD_REG32() and sd_wait_any(); compiled into `--data-source sdcard` builds only.
 *
 * Slot: UM1907 (32F746G-DISCOVERY user manual), "microSD card" section and the I/O assignment
 * table: SDMMC1 with D0..D3 = PC8..PC11, CK = PC12, CMD = PD2, and the card-detect switch
 * uSD_Detect on PC13 (it closes to ground with a card in: low = present, so the pin needs a
 * pull-up). Alternate function AF12 = SDMMC1 on all six pins (DS10916, table 12 "Alternate
 * function mapping").
 *
 * Peripheral: SDMMC v1 (RM0385 rev 8, chapter 35 "SD/SDIO/MMC card host interface", register
 * map in 35.8), base 0x40012C00 on APB2 (RM0385 2.2.2, table 1), clock enable RCC_APB2ENR
 * SDMMC1EN bit 11 (5.3.14). Bit positions below: RM0385 35.8.1-35.8.16.
 *
 * Kernel clock SDMMCCLK: RCC_DCKCFGR2 (5.3.26) SDMMC1SEL bit 28 = 0 takes the 48 MHz domain
 * clock, CK48MSEL bit 27 = 0 makes that PLL48CLK = main PLL VCO / PLLQ. board.h's clock_init()
 * already runs the VCO at 432 MHz with PLLQ 9 (target.json "clock" pll q): 48 MHz, the domain's
 * maximum (DS10916). Both select bits are 0 at reset, so the link build's clock setup is
 * untouched. When the PLL does not run (clock_init() fell back to the 16 MHz HSI), SDMMC1SEL = 1
 * takes SYSCLK instead. SDMMC_CK = SDMMCCLK / (CLKDIV + 2) (35.8.2): 48 MHz / 120 = 400 kHz
 * while identifying, 48 MHz / 2 = 24 MHz afterwards (default speed, at most 25 MHz: SD
 * Physical Layer Simplified Specification, fOD and fPP).
 */
#ifndef ZO_SDMMC_BOARD_STM32F746_H
#define ZO_SDMMC_BOARD_STM32F746_H

#define SDMMC_BASE            0x40012C00u
#define SDMMC_BOARD_NAME      "SDMMC1 (RM0385 ch. 35, v1)"

/* CLKCR (35.8.2): CLKDIV 7:0, CLKEN 8, PWRSAV 9, BYPASS 10, WIDBUS 12:11, NEGEDGE 13,
 * HWFC_EN 14. Hardware flow control stops SDMMC_CK while the FIFO cannot take or give a word,
 * which is what lets a polled CPU never overrun or underrun it. */
#define SDMMC_CLKCR_ON        (1u << 8)   /* CLKEN: SDMMC_CK runs */
#define SDMMC_CLKCR_WIDBUS_4  (1u << 11)  /* WIDBUS = 01: 4-bit bus */
#define SDMMC_CLKCR_HWFC      (1u << 14)
#define SDMMC_CLKDIV_MAX      0xFFu

/* CMD (35.8.4): CMDINDEX 5:0, WAITRESP 7:6 (00/10 none, 01 short, 11 long), WAITINT 8,
 * WAITPEND 9, CPSMEN 10. v1 has no "short without CRC" code: R3 (ACMD41) sets CCRCFAIL. */
#define SDMMC_CMD_WAITRESP_POS 6u
#define SDMMC_CMD_CPSMEN      (1u << 10)
#define SDMMC_CMD_TRANS       0u          /* v1: the data path starts from DCTRL DTEN */
#define SDMMC_CMD_STOP        0u
#define SDMMC_RESP_NOCRC      1u          /* a short response (checked: CCRCFAIL is expected) */

/* DCTRL (35.8.11): DTEN 0, DTDIR 1, DTMODE 2, DMAEN 3, DBLOCKSIZE 7:4. The DPSM starts with
 * DTEN, before the read or write command is sent (35.3.2, data path). */
#define SDMMC_DCTRL_START     (1u << 0)

/* ICR (35.8.14): every static flag of STA (bits 0-8, 10) and SDIOITC 22. */
#define SDMMC_ICR_ALL         0x004005FFu

/* ---- pins (UM1907; GPIO registers RM0385 6.4, base addresses 2.2.2 table 1) ------------ */

#define SDMMC_GPIO_DATA       0x40020800u /* GPIOC: D0..D3 = PC8..PC11, CK = PC12 */
#define SDMMC_GPIO_CMD        0x40020C00u /* GPIOD: CMD = PD2 */
#define SDMMC_CMD_PIN         2u
#define SDMMC_DETECT_PORT     0x40020800u /* GPIOC */
#define SDMMC_DETECT_PIN      13u         /* uSD_Detect, low = card present */
#define SDMMC_AF              12u         /* AF12 = SDMMC1 (DS10916 table 12) */

/* ---- RCC (RM0385 5.3) -------------------------------------------------------------------- */

#define SD_RCC_CR             SD_REG32(0x40023800u)        /* 5.3.1 */
#define SD_RCC_PLLCFGR        SD_REG32(0x40023804u)        /* 5.3.2 */
#define SD_RCC_CFGR           SD_REG32(0x40023808u)        /* 5.3.3 */
#define SD_RCC_AHB1ENR        SD_REG32(0x40023830u)        /* 5.3.10 */
#define SD_RCC_APB2ENR        SD_REG32(0x40023844u)        /* 5.3.14 */
#define SD_RCC_DCKCFGR2       SD_REG32(0x40023890u)        /* 5.3.26 */
#define SD_RCC_CR_PLLRDY      (1u << 25)
#define SD_RCC_AHB1ENR_GPIOCD ((1u << 2) | (1u << 3))     /* GPIOCEN, GPIODEN */
#define SD_RCC_APB2ENR_SDMMC1 (1u << 11)
#define SD_RCC_CK48MSEL       (1u << 27)
#define SD_RCC_SDMMC1SEL      (1u << 28)

/* SDMMC_CK = SDMMCCLK / (CLKDIV + 2): the smallest divider that stays at or below max_hz. */
static uint32_t sdmmc_clkdiv(uint32_t kernel_hz, uint32_t max_hz)
{
    uint32_t div = (kernel_hz + max_hz - 1u) / max_hz;
    div = div > 2u ? div - 2u : 0u;
    return div < SDMMC_CLKDIV_MAX ? div : SDMMC_CLKDIV_MAX;
}

static uint32_t sdmmc_ck_hz(uint32_t kernel_hz, uint32_t clkdiv)
{
    return kernel_hz / (clkdiv + 2u);
}

/* GPIOC/GPIOD and SDMMC1 clocks on; SDMMCCLK = PLL48CLK when the main PLL runs, else SYSCLK
 * (the reset HSI or the HSE, whichever clock_init() left). *kernel_hz: the frequency chosen. */
static int sdmmc_board_clocks(uint32_t *kernel_hz)
{
    SD_RCC_AHB1ENR |= SD_RCC_AHB1ENR_GPIOCD;
    SD_RCC_APB2ENR |= SD_RCC_APB2ENR_SDMMC1;
    (void)SD_RCC_APB2ENR; /* read back: the clock runs before the first access */
    if ((SD_RCC_CR & SD_RCC_CR_PLLRDY) != 0u) {
        uint32_t cfg = SD_RCC_PLLCFGR;
        uint32_t in = (cfg & (1u << 22)) != 0u ? 25000000u : 16000000u; /* PLLSRC: HSE / HSI */
        uint32_t m = cfg & 0x3Fu, n = (cfg >> 6) & 0x1FFu, q = (cfg >> 24) & 0xFu;
        if (m >= 2u && q >= 2u) {
            SD_RCC_DCKCFGR2 &= ~(SD_RCC_SDMMC1SEL | SD_RCC_CK48MSEL);
            *kernel_hz = in / m * n / q;
            return ZO_BLOCKDEV_OK;
        }
    }
    SD_RCC_DCKCFGR2 |= SD_RCC_SDMMC1SEL;
    /* SYSCLK without the PLL: SWS (3:2) = 00 HSI 16 MHz, 01 HSE 25 MHz (UM1907 crystal). */
    switch ((SD_RCC_CFGR >> 2) & 3u) {
    case 0u:
        *kernel_hz = 16000000u;
        return ZO_BLOCKDEV_OK;
    case 1u:
        *kernel_hz = 25000000u;
        return ZO_BLOCKDEV_OK;
    default:
        return ZO_BLOCKDEV_ERR_CLOCK; /* SYSCLK on a PLL that is not ready: not a state */
    }
}

#endif /* ZO_SDMMC_BOARD_STM32F746_H */
