/*
 * zo_image.h - reader of the zocodegen data image (docs/image.md) over zo_blockdev.h.
 *
 * The image is what `zocodegen pack` writes (formats/image.py): sector 0 is a header (magic
 * "ZOIMG01\0", version, CRC-32, input shape and dtype, quantization, number of classes,
 * record layout, train/val/test split table, checkpoint area, model hash); every sample is
 * one record of sectors_per_record sectors starting on a sector boundary: the input bytes,
 * then the label as int32 little endian, then the CRC-32 of those bytes (u32 little endian,
 * checked by every zo_image_read_sample: a record damaged on the medium is refused on its
 * own), then zero padding.
 *
 * C99, no heap, no libc beyond memcpy/memset. All state lives in the caller's zo_image
 * (about 700 bytes, including one sector of scratch), so one image can be read from several
 * places only if they do not interleave calls on the same zo_image.
 *
 *     zo_image img;
 *     if (zo_blockdev_attach("train.img") != 0 || zo_image_open(&img) != ZO_IMAGE_OK ||
 *         zo_image_expect_input(&img, MODEL_INPUT_BYTES) != ZO_IMAGE_OK) { ...fail... }
 *     for (i = 0; i < zo_image_count(&img, ZO_SPLIT_TRAIN); i++) {
 *         rc = zo_image_read_sample(&img, ZO_SPLIT_TRAIN, i, model_input, &label);
 *         ...
 *     }
 */
#ifndef ZO_IMAGE_H
#define ZO_IMAGE_H

#include <stdint.h>

#include "zo_blockdev.h"

#define ZO_IMAGE_VERSION 2u /* 2: records carry their CRC-32; 1 is refused */
#define ZO_IMAGE_MAX_RANK 4u
#define ZO_IMAGE_LABEL_BYTES 4u
#define ZO_IMAGE_RECORD_CRC_BYTES 4u

/* Splits, in the order of the split table and of the records on the medium. */
#define ZO_SPLIT_TRAIN 0
#define ZO_SPLIT_VAL 1
#define ZO_SPLIT_TEST 2
#define ZO_IMAGE_NUM_SPLITS 3

/* dtype codes of the header (docs/image.md) */
#define ZO_IMAGE_DTYPE_INT8 1u
#define ZO_IMAGE_DTYPE_UINT8 2u
#define ZO_IMAGE_DTYPE_FLOAT32 3u

/* header flags */
#define ZO_IMAGE_FLAG_QUANTIZATION 0x1u /* input_scale / input_zero_point are meaningful */


typedef struct {
    uint32_t first_lba; /* first sector of record 0 (0 when the split is absent) */
    uint32_t count;     /* number of records */
    uint32_t crc32;     /* CRC-32 of the input and label bytes of all records */
} zo_image_split;

typedef struct {
    uint32_t version;
    uint32_t flags;
    uint32_t image_sectors; /* header + records + checkpoint area */
    uint32_t input_rank;
    uint32_t input_dims[ZO_IMAGE_MAX_RANK]; /* unused dims are 0 */
    uint32_t dtype;                         /* ZO_IMAGE_DTYPE_* */
    uint32_t input_bytes;                   /* bytes of one record's input */
    uint32_t record_bytes;                  /* input_bytes + 4 (label) + 4 (CRC-32) */
    uint32_t sectors_per_record;
    uint32_t num_classes;
    float input_scale;        /* valid when flags & ZO_IMAGE_FLAG_QUANTIZATION */
    int32_t input_zero_point; /* idem */
    zo_image_split splits[ZO_IMAGE_NUM_SPLITS];
    uint32_t held_out; /* the val split's last records, the guard's end confirmation's alone */
    uint32_t checkpoint_lba;
    uint32_t checkpoint_sectors;
    uint8_t model_sha256[32]; /* all zero when unknown */
    int blockdev_rc;          /* the last failing zo_blockdev_* result (0 if none) */
    /* The last zo_image_read_sample call: its split, index and result, so a caller that only
     * saw it fail (the training engine's ZO_TRAIN_ERR_SAMPLE) can say which record and why. */
    int read_split;
    uint32_t read_index;
    int read_rc;
    uint32_t is_open;
    uint8_t sector[ZO_SECTOR_BYTES]; /* scratch */
} zo_image;

/* Read sector 0 from the attached block device and validate it: magic, version, CRC-32,
 * and the consistency of shape, dtype, record layout, splits and checkpoint area. */
int zo_image_open(zo_image *img);

/* Number of records of a split (0 for an absent split or a bad split index). */
uint32_t zo_image_count(const zo_image *img, int split);

/* How many of the val split's last records are held out: no step trains on them and no
 * check measures them; the training guard's end confirmation alone does (docs/image.md). */
uint32_t zo_image_held_out(const zo_image *img);

/* Read record `index` of `split`: its input_bytes input bytes into `input` (any size of
 * buffer that holds input_bytes; need not be a sector multiple) and its label into `label`.
 * Either pointer may be NULL to skip that part; the whole record is read and its CRC-32
 * checked either way. ZO_IMAGE_ERR_RECORD_CRC when the record does not match its CRC-32
 * (`input` then holds the bytes read, `label` is not written). A label outside
 * [0, num_classes) is still stored but returns ZO_IMAGE_ERR_LABEL. Every call records its
 * split, index and result in read_split, read_index and read_rc. */
int zo_image_read_sample(zo_image *img, int split, uint32_t index, uint8_t *input,
                         int32_t *label);

/* ZO_IMAGE_OK when the image's record input size is the model's input size in bytes
 * (int8/uint8: elements, float32: 4 * elements), ZO_IMAGE_ERR_INPUT_SIZE otherwise. */
int zo_image_expect_input(const zo_image *img, uint32_t model_input_bytes);

/* ZO_IMAGE_OK when every label of the image is a valid output of a model with
 * model_classes outputs (num_classes <= model_classes), ZO_IMAGE_ERR_CLASSES otherwise. */
int zo_image_expect_classes(const zo_image *img, uint32_t model_classes);

/* Re-read every record of a split and compare the CRC-32 of their input and label bytes with
 * the split table (ZO_IMAGE_ERR_SPLIT_CRC on mismatch: a damaged, missing or reordered
 * record). Reads count * sectors_per_record sectors. */
int zo_image_verify_split(zo_image *img, int split);

/* A short constant name for a ZO_IMAGE_* result, e.g. "ZO_IMAGE_ERR_CRC". */

#endif /* ZO_IMAGE_H */
