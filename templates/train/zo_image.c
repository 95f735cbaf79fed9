/* zo_image.c - reader of the zocodegen data image, see zo_image.h and docs/image.md. */
#include <string.h>

#include "zo_bytes.h"
#include "zo_crc32.h"
#include "zo_image.h"

/* Header field offsets (docs/image.md; zocodegen/formats/image.py has the same table). */
#define ZO_OFF_MAGIC 0u
#define ZO_OFF_VERSION 8u
#define ZO_OFF_HEADER_CRC 12u
#define ZO_OFF_SECTOR_BYTES 16u
#define ZO_OFF_FLAGS 20u
#define ZO_OFF_IMAGE_SECTORS 24u
#define ZO_OFF_INPUT_RANK 28u
#define ZO_OFF_INPUT_DIMS 32u
#define ZO_OFF_DTYPE 48u
#define ZO_OFF_INPUT_BYTES 52u
#define ZO_OFF_LABEL_OFFSET 56u
#define ZO_OFF_RECORD_BYTES 60u
#define ZO_OFF_SECTORS_PER_RECORD 64u
#define ZO_OFF_NUM_CLASSES 68u
#define ZO_OFF_INPUT_SCALE 72u
#define ZO_OFF_INPUT_ZERO_POINT 76u
#define ZO_OFF_SPLITS 80u /* 3 entries: first_lba, count, crc32, reserved */
#define ZO_SPLIT_ENTRY_BYTES 16u
#define ZO_OFF_HELD_OUT 108u /* the val entry's fourth word: its last records held out */
#define ZO_OFF_CHECKPOINT_LBA 128u
#define ZO_OFF_CHECKPOINT_SECTORS 132u
#define ZO_OFF_RECORD_CRC_OFFSET 136u
#define ZO_OFF_MODEL_SHA256 144u

static const uint8_t zo_image_magic[8] = {'Z', 'O', 'I', 'M', 'G', '0', '1', '\0'};

static int zo_valid_split(int split)
{
    return split >= 0 && split < ZO_IMAGE_NUM_SPLITS;
}

/* The checks every per-split call starts with: an open image and a split that exists. */
static int zo_check_split(const zo_image *img, int split)
{
    if (img == 0) {
        return ZO_IMAGE_ERR_ARG;
    }
    if (!img->is_open) {
        return ZO_IMAGE_ERR_NOT_OPEN;
    }
    return zo_valid_split(split) ? ZO_IMAGE_OK : ZO_IMAGE_ERR_SPLIT;
}

/* Does [first, first + length) lie inside sectors 1 .. image_sectors - 1? (empty: yes) */
static int zo_region_ok(uint32_t first, uint64_t length, uint32_t image_sectors)
{
    if (length == 0u) {
        return 1;
    }
    return first >= 1u && (uint64_t)first + length <= (uint64_t)image_sectors;
}

static int zo_read_sector(zo_image *img, uint32_t lba)
{
    int rc = zo_blockdev_read(lba, 1u, img->sector);
    if (rc != ZO_BLOCKDEV_OK) {
        img->blockdev_rc = rc;
        return ZO_IMAGE_ERR_IO;
    }
    return ZO_IMAGE_OK;
}

static int zo_parse_header(zo_image *img)
{
    const uint8_t *h = img->sector;
    static const uint8_t zero4[4] = {0u, 0u, 0u, 0u};
    uint32_t crc;
    uint32_t i;
    uint32_t itemsize;
    uint64_t elements = 1u;
    uint32_t scale_bits;

    for (i = 0u; i < 8u; i++) {
        if (h[ZO_OFF_MAGIC + i] != zo_image_magic[i]) {
            return ZO_IMAGE_ERR_MAGIC;
        }
    }
    img->version = zo_get_u32(h + ZO_OFF_VERSION);
    if (img->version != ZO_IMAGE_VERSION) {
        return ZO_IMAGE_ERR_VERSION;
    }
    /* CRC-32 of the sector with the CRC field read as zeros */
    crc = zo_crc32(0u, h, ZO_OFF_HEADER_CRC);
    crc = zo_crc32(crc, zero4, 4u);
    crc = zo_crc32(crc, h + ZO_OFF_HEADER_CRC + 4u, ZO_SECTOR_BYTES - ZO_OFF_HEADER_CRC - 4u);
    if (crc != zo_get_u32(h + ZO_OFF_HEADER_CRC)) {
        return ZO_IMAGE_ERR_CRC;
    }

    img->flags = zo_get_u32(h + ZO_OFF_FLAGS);
    img->image_sectors = zo_get_u32(h + ZO_OFF_IMAGE_SECTORS);
    img->input_rank = zo_get_u32(h + ZO_OFF_INPUT_RANK);
    for (i = 0u; i < ZO_IMAGE_MAX_RANK; i++) {
        img->input_dims[i] = zo_get_u32(h + ZO_OFF_INPUT_DIMS + 4u * i);
    }
    img->dtype = zo_get_u32(h + ZO_OFF_DTYPE);
    img->input_bytes = zo_get_u32(h + ZO_OFF_INPUT_BYTES);
    img->record_bytes = zo_get_u32(h + ZO_OFF_RECORD_BYTES);
    img->sectors_per_record = zo_get_u32(h + ZO_OFF_SECTORS_PER_RECORD);
    img->num_classes = zo_get_u32(h + ZO_OFF_NUM_CLASSES);
    scale_bits = zo_get_u32(h + ZO_OFF_INPUT_SCALE);
    memcpy(&img->input_scale, &scale_bits, sizeof img->input_scale);
    img->input_zero_point = (int32_t)zo_get_u32(h + ZO_OFF_INPUT_ZERO_POINT);
    for (i = 0u; i < (uint32_t)ZO_IMAGE_NUM_SPLITS; i++) {
        const uint8_t *e = h + ZO_OFF_SPLITS + ZO_SPLIT_ENTRY_BYTES * i;
        img->splits[i].first_lba = zo_get_u32(e);
        img->splits[i].count = zo_get_u32(e + 4u);
        img->splits[i].crc32 = zo_get_u32(e + 8u);
    }
    img->held_out = zo_get_u32(h + ZO_OFF_HELD_OUT);
    img->checkpoint_lba = zo_get_u32(h + ZO_OFF_CHECKPOINT_LBA);
    img->checkpoint_sectors = zo_get_u32(h + ZO_OFF_CHECKPOINT_SECTORS);
    memcpy(img->model_sha256, h + ZO_OFF_MODEL_SHA256, sizeof img->model_sha256);

    /* consistency */
    if (zo_get_u32(h + ZO_OFF_SECTOR_BYTES) != ZO_SECTOR_BYTES) {
        return ZO_IMAGE_ERR_FORMAT;
    }
    if (img->input_rank < 1u || img->input_rank > ZO_IMAGE_MAX_RANK) {
        return ZO_IMAGE_ERR_FORMAT;
    }
    for (i = 0u; i < ZO_IMAGE_MAX_RANK; i++) {
        uint32_t d = img->input_dims[i];
        if (i < img->input_rank) {
            if (d == 0u) {
                return ZO_IMAGE_ERR_FORMAT;
            }
            elements *= d;
            if (elements > 0xFFFFFFFFu) {
                return ZO_IMAGE_ERR_FORMAT;
            }
        } else if (d != 0u) {
            return ZO_IMAGE_ERR_FORMAT;
        }
    }
    if (img->dtype == ZO_IMAGE_DTYPE_INT8 || img->dtype == ZO_IMAGE_DTYPE_UINT8) {
        itemsize = 1u;
    } else if (img->dtype == ZO_IMAGE_DTYPE_FLOAT32) {
        itemsize = 4u;
    } else {
        return ZO_IMAGE_ERR_FORMAT;
    }
    if (elements * itemsize != (uint64_t)img->input_bytes ||
        zo_get_u32(h + ZO_OFF_LABEL_OFFSET) != img->input_bytes ||
        (uint64_t)zo_get_u32(h + ZO_OFF_RECORD_CRC_OFFSET) !=
            (uint64_t)img->input_bytes + ZO_IMAGE_LABEL_BYTES ||
        (uint64_t)img->record_bytes != (uint64_t)img->input_bytes + ZO_IMAGE_LABEL_BYTES +
                                           ZO_IMAGE_RECORD_CRC_BYTES ||
        img->sectors_per_record !=
            (uint32_t)(((uint64_t)img->record_bytes + ZO_SECTOR_BYTES - 1u) / ZO_SECTOR_BYTES)) {
        return ZO_IMAGE_ERR_FORMAT;
    }
    if (img->num_classes == 0u || img->num_classes > 0x7FFFFFFFu) {
        return ZO_IMAGE_ERR_FORMAT;
    }
    for (i = 0u; i < (uint32_t)ZO_IMAGE_NUM_SPLITS; i++) {
        uint64_t length = (uint64_t)img->splits[i].count * img->sectors_per_record;
        if (!zo_region_ok(img->splits[i].first_lba, length, img->image_sectors)) {
            return ZO_IMAGE_ERR_FORMAT;
        }
    }
    if (img->held_out > img->splits[ZO_SPLIT_VAL].count) {
        return ZO_IMAGE_ERR_FORMAT;
    }
    if (!zo_region_ok(img->checkpoint_lba, img->checkpoint_sectors, img->image_sectors)) {
        return ZO_IMAGE_ERR_FORMAT;
    }
    return ZO_IMAGE_OK;
}

int zo_image_open(zo_image *img)
{
    int rc;
    if (img == 0) {
        return ZO_IMAGE_ERR_ARG;
    }
    memset(img, 0, sizeof *img);
    rc = zo_read_sector(img, 0u);
    if (rc == ZO_IMAGE_OK) {
        rc = zo_parse_header(img);
    }
    img->is_open = rc == ZO_IMAGE_OK ? 1u : 0u;
    return rc;
}

uint32_t zo_image_count(const zo_image *img, int split)
{
    if (img == 0 || !img->is_open || !zo_valid_split(split)) {
        return 0u;
    }
    return img->splits[split].count;
}

uint32_t zo_image_held_out(const zo_image *img)
{
    return img == 0 || !img->is_open ? 0u : img->held_out;
}

/* Read the record at `lba` (see zo_image_read_sample) and check its CRC-32 and label. */
static int zo_read_record(zo_image *img, uint32_t lba, uint8_t *input, int32_t *label)
{
    const uint32_t crc_at = img->input_bytes + ZO_IMAGE_LABEL_BYTES;
    /* Sectors holding only input bytes go straight into the caller's buffer... */
    const uint32_t full = input != 0 ? img->input_bytes / ZO_SECTOR_BYTES : 0u;
    uint8_t tail[ZO_IMAGE_LABEL_BYTES + ZO_IMAGE_RECORD_CRC_BYTES]; /* label, CRC-32 */
    uint32_t crc = 0u;
    uint32_t pos;
    int32_t value;
    int rc;

    if (full > 0u) {
        rc = zo_blockdev_read(lba, full, input);
        if (rc != ZO_BLOCKDEV_OK) {
            img->blockdev_rc = rc;
            return ZO_IMAGE_ERR_IO;
        }
        crc = zo_crc32(crc, input, full * ZO_SECTOR_BYTES);
    }
    /* ...the rest of the record (the label and CRC may straddle two sectors) through the
     * scratch sector. pos is where the sector starts in the record. */
    for (pos = full * ZO_SECTOR_BYTES; pos < img->record_bytes; pos += ZO_SECTOR_BYTES) {
        const uint32_t left = img->record_bytes - pos;
        const uint32_t n = left < ZO_SECTOR_BYTES ? left : ZO_SECTOR_BYTES;
        uint32_t k = 0u;
        rc = zo_read_sector(img, lba + pos / ZO_SECTOR_BYTES);
        if (rc != ZO_IMAGE_OK) {
            return rc;
        }
        if (pos < crc_at) {
            crc = zo_crc32(crc, img->sector, crc_at - pos < n ? crc_at - pos : n);
        }
        if (pos < img->input_bytes) {
            k = img->input_bytes - pos < n ? img->input_bytes - pos : n;
            if (input != 0) {
                memcpy(input + pos, img->sector, k);
            }
        }
        for (; k < n; k++) {
            tail[pos + k - img->input_bytes] = img->sector[k];
        }
    }
    if (crc != zo_get_u32(tail + ZO_IMAGE_LABEL_BYTES)) {
        return ZO_IMAGE_ERR_RECORD_CRC;
    }
    value = (int32_t)zo_get_u32(tail);
    if (label != 0) {
        *label = value;
    }
    if (value < 0 || (uint32_t)value >= img->num_classes) {
        return ZO_IMAGE_ERR_LABEL;
    }
    return ZO_IMAGE_OK;
}

int zo_image_read_sample(zo_image *img, int split, uint32_t index, uint8_t *input,
                         int32_t *label)
{
    int rc = zo_check_split(img, split);
    if (rc == ZO_IMAGE_ERR_ARG) {
        return rc;
    }
    if (rc == ZO_IMAGE_OK && index >= img->splits[split].count) {
        rc = ZO_IMAGE_ERR_INDEX;
    }
    if (rc == ZO_IMAGE_OK) {
        /* zo_image_open checked that the whole split lies inside the image: no overflow */
        rc = zo_read_record(img, img->splits[split].first_lba + index * img->sectors_per_record,
                            input, label);
    }
    img->read_split = split;
    img->read_index = index;
    img->read_rc = rc;
    return rc;
}

int zo_image_expect_input(const zo_image *img, uint32_t model_input_bytes)
{
    if (img == 0) {
        return ZO_IMAGE_ERR_ARG;
    }
    if (!img->is_open) {
        return ZO_IMAGE_ERR_NOT_OPEN;
    }
    return img->input_bytes == model_input_bytes ? ZO_IMAGE_OK : ZO_IMAGE_ERR_INPUT_SIZE;
}

int zo_image_expect_classes(const zo_image *img, uint32_t model_classes)
{
    if (img == 0) {
        return ZO_IMAGE_ERR_ARG;
    }
    if (!img->is_open) {
        return ZO_IMAGE_ERR_NOT_OPEN;
    }
    return img->num_classes <= model_classes ? ZO_IMAGE_OK : ZO_IMAGE_ERR_CLASSES;
}

int zo_image_verify_split(zo_image *img, int split)
{
    uint32_t r;
    uint32_t s;
    uint32_t crc = 0u;
    uint32_t lba;
    int rc;
    rc = zo_check_split(img, split);
    if (rc != ZO_IMAGE_OK) {
        return rc;
    }
    lba = img->splits[split].first_lba;
    for (r = 0u; r < img->splits[split].count; r++) {
        uint32_t left = img->record_bytes - ZO_IMAGE_RECORD_CRC_BYTES; /* input, label */
        for (s = 0u; s < img->sectors_per_record; s++) {
            uint32_t n = left < ZO_SECTOR_BYTES ? left : ZO_SECTOR_BYTES;
            rc = zo_read_sector(img, lba);
            if (rc != ZO_IMAGE_OK) {
                return rc;
            }
            crc = zo_crc32(crc, img->sector, n);
            left -= n;
            lba++;
        }
    }
    return crc == img->splits[split].crc32 ? ZO_IMAGE_OK : ZO_IMAGE_ERR_SPLIT_CRC;
}
