/*
 * blockdev_sdmmc.c - zo_blockdev.h backend of `--data-source sdcard` board firmware (zocodegen,
 * docs/sdcard.md "The driver"): the microSD card in the board's slot on SDMMC1, the packed
 * image written raw to it (LBA n of the image = block n of the card). The board's facts
 * (register base and layout of its SDMMC version, pins, card detect, kernel clock) come from
 * sdmmc_board.h, one per target.
 *
 * Polled, not DMA or interrupts: the firmware moves 1..N sectors between training steps and
 * has nothing else to do while they move, so a CPU loop on the FIFO costs no time it could
 * use; it needs no DMA stream or IDMA set-up, no cache maintenance of the buffers (the CPU
 * reads the FIFO itself), no heap and no interrupt handler. Hardware flow control (CLKCR
 * HWFC_EN) stops the card clock while the FIFO is full or empty, so a slow loop never
 * overruns it. Every wait is bounded by the DWT cycle counter (platform_cycles(), so
 * platform_init() runs first) and by a poll count: no failure hangs.
 *
 * Card protocol: SD Physical Layer Simplified Specification (version 2.00 and later): 4.2
 * card identification (CMD0, CMD8 with pattern 0xAA at 2.7-3.6 V, ACMD41 with HCS until the
 * OCR's busy bit says powered up, CMD2, CMD3), 5.3 CSD (capacity), CMD7 to select, ACMD6 for
 * the 4-bit bus, CMD16 for SDSC's 512-byte blocks, CMD17/CMD18 + CMD12 reads, CMD24/CMD25 +
 * CMD12 writes, then CMD13 until the card is back in the transfer state with READY_FOR_DATA:
 * the data is programmed when a write returns 0. SDHC/SDXC take block addresses, SDSC (CCS
 * = 0) byte addresses; SD 1.x cards (no answer to CMD8) are refused with ZO_BLOCKDEV_ERR_CARD.
 *
 * Statuses: response CRC -> ZO_BLOCKDEV_ERR_CRC, command timeout -> ..._TIMEOUT, data CRC ->
 * ..._CRC, data timeout -> ..._TIMEOUT, FIFO over/underrun -> ..._IO, card-detect switch open
 * -> ..._NO_CARD, a write whose status then shows an error -> ..._WRITE, sectors beyond the
 * card's capacity -> ..._RANGE (checked before the command, and from OUT_OF_RANGE /
 * ADDRESS_ERROR in its response).
 */
#include <stdint.h>

#include "platform.h"
#include "zo_blockdev.h"

#define SD_REG32(addr) (*(volatile uint32_t *)(uintptr_t)(addr))

static uint32_t sd_cycles_per_ms(void)
{
    uint32_t hz = platform_cycles_per_second();
    return hz >= 1000u ? hz / 1000u : 64000u; /* unknown: as if 64 MHz */
}

/* A bounded wait: over once `ms` milliseconds of the cycle counter have passed, or after as
 * many polls (each takes at least one cycle) should the counter not run. */
struct sd_wait {
    uint32_t start, limit, polls;
};

static void sd_wait_begin(struct sd_wait *w, uint32_t ms)
{
    w->start = platform_cycles();
    w->limit = ms * sd_cycles_per_ms();
    w->polls = 0u;
}

static int sd_wait_over(struct sd_wait *w)
{
    return ++w->polls >= w->limit || platform_cycles() - w->start >= w->limit;
}

/* The register's value once any bit of mask is set in it, within `ms` milliseconds; 0 when
 * none was. */
static uint32_t sd_wait_any(volatile uint32_t *reg, uint32_t mask, uint32_t ms)
{
    struct sd_wait w;
    uint32_t value;
    sd_wait_begin(&w, ms);
    while (((value = *reg) & mask) == 0u) {
        if (sd_wait_over(&w)) {
            return 0u;
        }
    }
    return value;
}

#include "sdmmc_board.h"

/* ---- SDMMC registers: the same offsets on v1 and v2 (RM0385 35.8, RM0455 SDMMC) -------- */

#define SDMMC_POWER   SD_REG32(SDMMC_BASE + 0x00u)
#define SDMMC_CLKCR   SD_REG32(SDMMC_BASE + 0x04u)
#define SDMMC_ARG     SD_REG32(SDMMC_BASE + 0x08u)
#define SDMMC_CMD     SD_REG32(SDMMC_BASE + 0x0Cu)
#define SDMMC_RESPCMD SD_REG32(SDMMC_BASE + 0x10u)
#define SDMMC_RESP(i) SD_REG32(SDMMC_BASE + 0x14u + 4u * (i)) /* RESP1..RESP4: i = 0..3 */
#define SDMMC_DTIMER  SD_REG32(SDMMC_BASE + 0x24u)
#define SDMMC_DLEN    SD_REG32(SDMMC_BASE + 0x28u)
#define SDMMC_DCTRL   SD_REG32(SDMMC_BASE + 0x2Cu)
#define SDMMC_STA     SD_REG32(SDMMC_BASE + 0x34u)
#define SDMMC_ICR     SD_REG32(SDMMC_BASE + 0x38u)
#define SDMMC_MASK    SD_REG32(SDMMC_BASE + 0x3Cu)
#define SDMMC_FIFO    SD_REG32(SDMMC_BASE + 0x80u)

#define SDMMC_POWER_ON   3u            /* PWRCTRL = 11 */
#define STA_CCRCFAIL     (1u << 0)     /* STA: the same positions on v1 and v2 */
#define STA_DCRCFAIL     (1u << 1)
#define STA_CTIMEOUT     (1u << 2)
#define STA_DTIMEOUT     (1u << 3)
#define STA_TXUNDERR     (1u << 4)
#define STA_RXOVERR      (1u << 5)
#define STA_CMDREND      (1u << 6)
#define STA_CMDSENT      (1u << 7)
#define STA_DATAEND      (1u << 8)
#define STA_TXFIFOHE     (1u << 14)
#define STA_RXFIFOE      (1u << 19)
#define STA_DATA_ERRORS  (STA_DCRCFAIL | STA_DTIMEOUT | STA_TXUNDERR | STA_RXOVERR)
#define DCTRL_DTDIR_READ (1u << 1)
#define DCTRL_BLOCK_512  (9u << 4)     /* DBLOCKSIZE = log2(512) */

/* ---- the card (SD Physical Layer Simplified Specification) ------------------------------ */

enum sd_resp { RESP_NONE = 0, RESP_SHORT = 1, RESP_LONG = 3, RESP_R3 = 4 };
#define ACMD       0x40u /* a flag of ours on the index: send CMD55 first */

#define IDENT_HZ          400000u   /* fOD, identification */
#define DATA_HZ           25000000u /* fPP, default speed */
#define CMD_TIMEOUT_MS    10u       /* the CPSM's own response timeout is 64 SDMMC_CK */
#define INIT_TIMEOUT_MS   1000u     /* 4.2.3: ACMD41 initialization, 1 s */
#define READ_TIMEOUT_MS   100u      /* 4.6.2.1: SDHC read access, 100 ms */
#define WRITE_TIMEOUT_MS  500u      /* 4.6.2.2: SDXC write busy, 500 ms (SDHC 250 ms) */
#define MAX_SECTORS       1024u     /* per command (DLEN holds 25 bits on both versions) */

#define OCR_BUSY        (1u << 31)  /* 5.1: power-up finished */
#define OCR_CCS         (1u << 30)  /* card capacity status: block addressing */
#define OCR_HCS         (1u << 30)  /* host capacity support, in ACMD41's argument */
#define OCR_3V3         0x00FF8000u /* 2.7-3.6 V window */
#define R1_OUT_OF_RANGE (1u << 31)  /* 4.10.1 card status */
#define R1_ADDRESS_ERR  (1u << 30)
#define R1_COM_CRC_ERR  (1u << 23)
#define R1_ERRORS       0xFDB90008u /* every error bit but ILLEGAL_COMMAND (22) */
#define R1_STATE(s)     (((s) >> 9) & 0xFu)
#define R1_READY        (1u << 8)   /* READY_FOR_DATA */
#define STATE_TRAN      4u
#define STATE_DATA      5u
#define STATE_RCV       6u

static struct {
    uint32_t sectors;       /* capacity from the CSD; 0: not attached */
    uint32_t rca;           /* relative card address << 16 */
    uint32_t data_hz;       /* SDMMC_CK after identification */
    uint32_t byte_address;  /* SDSC: the argument is a byte address */
} sd;

/* Sends a command (index | ACMD for an application command) and waits for its response. */
static int sd_command(uint32_t index, uint32_t arg, enum sd_resp resp, uint32_t extra)
{
    if ((index & ACMD) != 0u) {
        int rc = sd_command(55u, sd.rca, RESP_SHORT, 0u);
        if (rc != ZO_BLOCKDEV_OK) {
            return rc;
        }
        index &= ~ACMD;
    }
    const uint32_t done = resp == RESP_NONE ? STA_CMDSENT : STA_CMDREND | STA_CCRCFAIL;
    const uint32_t wait = resp == RESP_R3 ? SDMMC_RESP_NOCRC : (uint32_t)resp;
    SDMMC_ICR = SDMMC_ICR_ALL;
    SDMMC_ARG = arg;
    SDMMC_CMD = index | (wait << SDMMC_CMD_WAITRESP_POS) | extra | SDMMC_CMD_CPSMEN;
    const uint32_t sta = sd_wait_any(&SDMMC_STA, done | STA_CTIMEOUT, CMD_TIMEOUT_MS);
    SDMMC_ICR = STA_CMDSENT | STA_CMDREND | STA_CCRCFAIL | STA_CTIMEOUT;
    if (sta == 0u || (sta & STA_CTIMEOUT) != 0u) {
        return ZO_BLOCKDEV_ERR_TIMEOUT;
    }
    /* R3 has no CRC: v1 flags CCRCFAIL for it (RM0385 35.4.6), v2 is told not to check */
    if ((sta & STA_CCRCFAIL) != 0u && resp != RESP_R3) {
        return ZO_BLOCKDEV_ERR_CRC;
    }
    if (resp == RESP_SHORT && SDMMC_RESPCMD != index) {
        return ZO_BLOCKDEV_ERR_CARD;
    }
    return ZO_BLOCKDEV_OK;
}

/* The errors of an R1 card status, as the block-device status the caller reports. */
static int sd_status_error(uint32_t status, int otherwise)
{
    if ((status & (R1_OUT_OF_RANGE | R1_ADDRESS_ERR)) != 0u) {
        return ZO_BLOCKDEV_ERR_RANGE;
    }
    if ((status & R1_COM_CRC_ERR) != 0u) {
        return ZO_BLOCKDEV_ERR_CRC;
    }
    return (status & R1_ERRORS) != 0u ? otherwise : ZO_BLOCKDEV_OK;
}

/* An R1 command: the command, then the errors its card status reports. */
static int sd_r1(uint32_t index, uint32_t arg, uint32_t extra, int otherwise)
{
    int rc = sd_command(index, arg, RESP_SHORT, extra);
    return rc != ZO_BLOCKDEV_OK ? rc : sd_status_error(SDMMC_RESP(0), otherwise);
}

/* CMD13 until the card is back in the transfer state and ready for data (the end of a
 * write's programming, 4.3.4), then the errors its status reports. */
static int sd_wait_ready(int otherwise)
{
    struct sd_wait w;
    sd_wait_begin(&w, WRITE_TIMEOUT_MS);
    for (;;) {
        int rc = sd_command(13u, sd.rca, RESP_SHORT, 0u);
        uint32_t status = SDMMC_RESP(0);
        if (rc != ZO_BLOCKDEV_OK) {
            return rc;
        }
        if (R1_STATE(status) == STATE_TRAN && (status & R1_READY) != 0u) {
            return sd_status_error(status, otherwise);
        }
        if (sd_wait_over(&w)) {
            return ZO_BLOCKDEV_ERR_TIMEOUT;
        }
    }
}

/* Capacity in 512-byte sectors from the CSD (5.3): version 2.0 (SDHC/SDXC) (C_SIZE + 1) *
 * 1024, version 1.0 (SDSC) (C_SIZE + 1) << (C_SIZE_MULT + 2 + READ_BL_LEN - 9). csd[0] holds
 * bits 127:96. At most 2^32 - 1 sectors (LBAs are 32 bits). */
static uint32_t sd_capacity(const uint32_t csd[4])
{
    uint64_t sectors;
    if ((csd[0] >> 30) == 1u) {
        uint32_t c_size = ((csd[1] & 0x3Fu) << 16) | (csd[2] >> 16);  /* bits 69:48 */
        sectors = ((uint64_t)c_size + 1u) * 1024u;
    } else {
        uint32_t read_bl_len = (csd[1] >> 16) & 0xFu;                 /* bits 83:80 */
        uint32_t c_size = ((csd[1] & 0x3FFu) << 2) | (csd[2] >> 30);   /* bits 73:62 */
        uint32_t shift = ((csd[2] >> 15) & 7u) + 2u + read_bl_len;     /* C_SIZE_MULT 49:47 */
        sectors = shift >= 9u ? ((uint64_t)c_size + 1u) << (shift - 9u) : 0u;
    }
    return sectors > 0xFFFFFFFFu ? 0xFFFFFFFFu : (uint32_t)sectors;
}

/* A pin in alternate function `af` (pulled up or not), fast enough for 25 MHz. GPIO
 * registers, the same on both families: MODER 0x00, OTYPER 0x04, OSPEEDR 0x08, PUPDR 0x0C,
 * IDR 0x10, AFRL/AFRH 0x20/0x24. */
static void sd_pin(uint32_t port, uint32_t pin, int pull_up)
{
    uint32_t two = 2u * pin, four = 4u * (pin % 8u);
    volatile uint32_t *afr = &SD_REG32(port + 0x20u + 4u * (pin / 8u));
    *afr = (*afr & ~(0xFu << four)) | (SDMMC_AF << four);
    SD_REG32(port + 0x04u) &= ~(1u << pin);                                        /* push-pull */
    SD_REG32(port + 0x08u) = (SD_REG32(port + 0x08u) & ~(3u << two)) | (2u << two); /* fast */
    SD_REG32(port + 0x0Cu) = (SD_REG32(port + 0x0Cu) & ~(3u << two))
                             | ((pull_up ? 1u : 0u) << two);
    SD_REG32(port + 0x00u) = (SD_REG32(port + 0x00u) & ~(3u << two)) | (2u << two);
}

static void sd_pause_ms(uint32_t ms)
{
    struct sd_wait w;
    sd_wait_begin(&w, ms);
    while (!sd_wait_over(&w)) {
    }
}

/* The card-detect switch: the pin as an input with its pull-up; closed (low) with a card. */
static int sd_card_present(void)
{
    const uint32_t port = SDMMC_DETECT_PORT, two = 2u * SDMMC_DETECT_PIN;
    SD_REG32(port + 0x0Cu) = (SD_REG32(port + 0x0Cu) & ~(3u << two)) | (1u << two);
    SD_REG32(port + 0x00u) &= ~(3u << two);
    sd_pause_ms(1u); /* the pull-up charges the line: 1 ms is ample */
    return (SD_REG32(port + 0x10u) & (1u << SDMMC_DETECT_PIN)) == 0u;
}

/* CMD0, CMD8, ACMD41 until powered up: the card is ready; sets sd.byte_address. */
static int sd_power_up(void)
{
    struct sd_wait w;
    int rc = sd_command(0u, 0u, RESP_NONE, 0u);                     /* GO_IDLE_STATE */
    if (rc == ZO_BLOCKDEV_OK) {
        rc = sd_command(8u, 0x1AAu, RESP_SHORT, 0u);                /* SEND_IF_COND (R7) */
        if (rc == ZO_BLOCKDEV_ERR_TIMEOUT
            || (rc == ZO_BLOCKDEV_OK && (SDMMC_RESP(0) & 0xFFFu) != 0x1AAu)) {
            return ZO_BLOCKDEV_ERR_CARD; /* SD 1.x, or the voltage is refused */
        }
    }
    sd_wait_begin(&w, INIT_TIMEOUT_MS);
    while (rc == ZO_BLOCKDEV_OK) {
        rc = sd_command(ACMD | 41u, OCR_HCS | OCR_3V3, RESP_R3, 0u); /* SD_SEND_OP_COND */
        uint32_t ocr = SDMMC_RESP(0);
        if (rc == ZO_BLOCKDEV_OK && (ocr & OCR_BUSY) != 0u) {
            sd.byte_address = (ocr & OCR_CCS) == 0u;
            return (ocr & OCR_3V3) != 0u ? ZO_BLOCKDEV_OK : ZO_BLOCKDEV_ERR_CARD;
        }
        if (rc == ZO_BLOCKDEV_OK && sd_wait_over(&w)) {
            return ZO_BLOCKDEV_ERR_TIMEOUT;
        }
    }
    return rc;
}

/* 4.2: power the bus at 400 kHz, identify, read the capacity, select, 4-bit bus at the data
 * clock. Sets sd.sectors last, so a failure leaves the card detached. */
static int sd_identify(uint32_t kernel_hz)
{
    uint32_t csd[4];
    SDMMC_POWER = 0u;
    SDMMC_MASK = 0u;
    SDMMC_DCTRL = 0u;
    SDMMC_CLKCR = sdmmc_clkdiv(kernel_hz, IDENT_HZ) | SDMMC_CLKCR_HWFC | SDMMC_CLKCR_ON;
    (void)SDMMC_CLKCR; /* v1: seven PCLK2 periods between two POWER writes (RM0385 35.8.1) */
    SDMMC_POWER = SDMMC_POWER_ON;
    sd_pause_ms(2u); /* 6.4.1: 1 ms of supply, then at least 74 clocks (185 us) */
    sd.rca = 0u;
    int rc = sd_power_up();
    if (rc == ZO_BLOCKDEV_OK) {
        rc = sd_command(2u, 0u, RESP_LONG, 0u);                     /* ALL_SEND_CID (R2) */
    }
    if (rc == ZO_BLOCKDEV_OK) {
        rc = sd_command(3u, 0u, RESP_SHORT, 0u);                    /* SEND_RELATIVE_ADDR */
        rc = rc == ZO_BLOCKDEV_OK && (SDMMC_RESP(0) & 0xE000u) != 0u /* R6 errors 15:13 */
             ? ZO_BLOCKDEV_ERR_CARD : rc;
        sd.rca = SDMMC_RESP(0) & 0xFFFF0000u;
    }
    if (rc == ZO_BLOCKDEV_OK) {
        rc = sd_command(9u, sd.rca, RESP_LONG, 0u);                 /* SEND_CSD (R2) */
        for (uint32_t i = 0u; i < 4u; i++) {
            csd[i] = SDMMC_RESP(i);
        }
    }
    if (rc == ZO_BLOCKDEV_OK) {
        rc = sd_r1(7u, sd.rca, 0u, ZO_BLOCKDEV_ERR_CARD);           /* SELECT_CARD (R1b) */
    }
    if (rc == ZO_BLOCKDEV_OK) {
        rc = sd_wait_ready(ZO_BLOCKDEV_ERR_CARD);
    }
    if (rc == ZO_BLOCKDEV_OK) {
        rc = sd_r1(ACMD | 6u, 2u, 0u, ZO_BLOCKDEV_ERR_CARD);        /* SET_BUS_WIDTH: 4 bits */
    }
    if (rc == ZO_BLOCKDEV_OK && sd.byte_address) {
        rc = sd_r1(16u, ZO_SECTOR_BYTES, 0u, ZO_BLOCKDEV_ERR_CARD); /* SET_BLOCKLEN */
    }
    if (rc != ZO_BLOCKDEV_OK) {
        return rc;
    }
    const uint32_t div = sdmmc_clkdiv(kernel_hz, DATA_HZ);
    SDMMC_CLKCR = div | SDMMC_CLKCR_WIDBUS_4 | SDMMC_CLKCR_HWFC | SDMMC_CLKCR_ON;
    sd.data_hz = sdmmc_ck_hz(kernel_hz, div);
    sd.sectors = sd_capacity(csd);
    return sd.sectors != 0u ? ZO_BLOCKDEV_OK : ZO_BLOCKDEV_ERR_CARD;
}

int zo_blockdev_attach(const char *path)
{
    uint32_t kernel_hz = 0u;
    (void)path; /* the card in the slot */
    sd.sectors = 0u;
    int rc = sdmmc_board_clocks(&kernel_hz);
    if (rc != ZO_BLOCKDEV_OK) {
        return rc;
    }
    if (!sd_card_present()) {
        return ZO_BLOCKDEV_ERR_NO_CARD;
    }
    for (uint32_t pin = 8u; pin <= 12u; pin++) { /* D0..D3 pulled up, CK (PC12) driven */
        sd_pin(SDMMC_GPIO_DATA, pin, pin != 12u);
    }
    sd_pin(SDMMC_GPIO_CMD, SDMMC_CMD_PIN, 1);
    return sd_identify(kernel_hz);
}

/* ---- transfers ---------------------------------------------------------------------------- */

/* The checks both transfers share: attached, a buffer, the sectors on the card. */
static int sd_check(uint32_t lba, uint32_t count, const uint8_t *buffer)
{
    if (sd.sectors == 0u) {
        return ZO_BLOCKDEV_ERR_NOT_ATTACHED;
    }
    if (count == 0u) {
        return ZO_BLOCKDEV_OK;
    }
    if (buffer == 0) {
        return ZO_BLOCKDEV_ERR_ARG;
    }
    return lba < sd.sectors && count <= sd.sectors - lba ? ZO_BLOCKDEV_OK
                                                         : ZO_BLOCKDEV_ERR_RANGE;
}

static int sd_data_error(uint32_t sta)
{
    if ((sta & STA_DCRCFAIL) != 0u) {
        return ZO_BLOCKDEV_ERR_CRC;
    }
    return (sta & STA_DTIMEOUT) != 0u ? ZO_BLOCKDEV_ERR_TIMEOUT : ZO_BLOCKDEV_ERR_IO;
}

/* The data path for n sectors (dir: DTDIR), then the command that moves them. */
static int sd_start(uint32_t index, uint32_t lba, uint32_t n, uint32_t dir, int otherwise)
{
    SDMMC_ICR = SDMMC_ICR_ALL;
    SDMMC_DTIMER = sd.data_hz / 1000u * (dir != 0u ? READ_TIMEOUT_MS : WRITE_TIMEOUT_MS);
    SDMMC_DLEN = n * ZO_SECTOR_BYTES;
    SDMMC_DCTRL = dir | DCTRL_BLOCK_512 | SDMMC_DCTRL_START;
    return sd_r1(index, sd.byte_address ? lba * ZO_SECTOR_BYTES : lba, SDMMC_CMD_TRANS,
                 otherwise);
}

/* Waits for DATAEND (the last block moved, its CRC checked) or a data error. */
static int sd_data_end(uint32_t ms)
{
    const uint32_t sta = sd_wait_any(&SDMMC_STA, STA_DATAEND | STA_DATA_ERRORS, ms);
    if (sta == 0u) {
        return ZO_BLOCKDEV_ERR_TIMEOUT;
    }
    return (sta & STA_DATA_ERRORS) != 0u ? sd_data_error(sta) : ZO_BLOCKDEV_OK;
}

/* After a transfer: CMD12 ends a multiple-block one, and on a failure whatever the card is
 * still sending or receiving; then the card is waited for until it is back in tran. */
static int sd_finish(uint32_t multi, int rc, int otherwise)
{
    if (rc != ZO_BLOCKDEV_OK) {
        uint32_t state = sd_command(13u, sd.rca, RESP_SHORT, 0u) == ZO_BLOCKDEV_OK
                         ? R1_STATE(SDMMC_RESP(0)) : STATE_TRAN;
        multi = state == STATE_DATA || state == STATE_RCV;
    }
    if (multi) {
        int stop = sd_r1(12u, 0u, SDMMC_CMD_STOP, otherwise);      /* STOP_TRANSMISSION */
        rc = rc != ZO_BLOCKDEV_OK ? rc : stop;
    }
    int ready = sd_wait_ready(otherwise);
    SDMMC_ICR = SDMMC_ICR_ALL;
    return rc != ZO_BLOCKDEV_OK ? rc : ready;
}

/* n sectors through the FIFO: into dst (any alignment) a word whenever one is there, or from
 * src when it is given, eight words whenever the FIFO is half empty. The wait starts again
 * with every sector, so a long transfer on a slow clock is not cut short. */
static int sd_move(uint8_t *dst, const uint8_t *src, uint32_t n)
{
    const uint32_t ms = src != 0 ? WRITE_TIMEOUT_MS : READ_TIMEOUT_MS;
    uint32_t words = n * (ZO_SECTOR_BYTES / 4u);
    struct sd_wait w;
    sd_wait_begin(&w, ms);
    while (words > 0u) {
        const uint32_t sta = SDMMC_STA;
        if ((sta & STA_DATA_ERRORS) != 0u) {
            return sd_data_error(sta);
        }
        uint32_t burst = src != 0 ? ((sta & STA_TXFIFOHE) != 0u ? 8u : 0u)
                                  : ((sta & STA_RXFIFOE) == 0u ? 1u : 0u);
        if (burst == 0u && sd_wait_over(&w)) {
            return ZO_BLOCKDEV_ERR_TIMEOUT;
        }
        for (; burst > 0u && words > 0u; burst--, words--) {
            if (src != 0) {
                SDMMC_FIFO = (uint32_t)src[0] | ((uint32_t)src[1] << 8)
                             | ((uint32_t)src[2] << 16) | ((uint32_t)src[3] << 24);
                src += 4;
            } else {
                const uint32_t v = SDMMC_FIFO;
                dst[0] = (uint8_t)v;
                dst[1] = (uint8_t)(v >> 8);
                dst[2] = (uint8_t)(v >> 16);
                dst[3] = (uint8_t)(v >> 24);
                dst += 4;
            }
            if ((words & 127u) == 1u) { /* the last word of a sector */
                sd_wait_begin(&w, ms);
            }
        }
    }
    return sd_data_end(ms);
}

/* Reads into dst, or writes src when it is given: count sectors from lba, at most
 * MAX_SECTORS a command. */
static int sd_transfer(uint32_t lba, uint32_t count, uint8_t *dst, const uint8_t *src)
{
    const int write = src != 0;
    const int otherwise = write ? ZO_BLOCKDEV_ERR_WRITE : ZO_BLOCKDEV_ERR_IO;
    int rc = sd_check(lba, count, write ? src : dst);
    for (uint32_t done = 0u; rc == ZO_BLOCKDEV_OK && done < count;) {
        const uint32_t n = count - done < MAX_SECTORS ? count - done : MAX_SECTORS;
        const uint32_t at = done * ZO_SECTOR_BYTES;
        const uint32_t index = write ? (n > 1u ? 25u : 24u) : (n > 1u ? 18u : 17u);
        rc = sd_start(index, lba + done, n, write ? 0u : DCTRL_DTDIR_READ, otherwise);
        if (rc == ZO_BLOCKDEV_OK) {
            rc = sd_move(write ? 0 : dst + at, write ? src + at : 0, n);
        }
        rc = sd_finish(n > 1u, rc, otherwise);
        done += n;
    }
    return rc;
}

int zo_blockdev_read(uint32_t lba, uint32_t count, uint8_t *dst)
{
    return sd_transfer(lba, count, dst, 0);
}

int zo_blockdev_write(uint32_t lba, uint32_t count, const uint8_t *src)
{
    return sd_transfer(lba, count, 0, src);
}
