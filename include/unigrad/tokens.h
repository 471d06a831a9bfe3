/* Token data for language models, as nanoGPT trains them: a flat file of
 * token ids (its train.bin and val.bin), windows of it drawn at random for
 * each step, and a character vocabulary for plain text.
 *
 *   ug_char_vocab *vocab;  ug_tokens *all, *train, *val;
 *   ug_char_vocab_build(text, bytes, &vocab);        // sorted unique bytes
 *   ug_tokens_from_text(vocab, text, bytes, &all);
 *   ug_tokens_split(all, 0.9, &train, &val);         // the first 90%, the rest
 *   // or: ug_tokens_open("train.bin", &(ug_token_file){.width = 2}, &train);
 *   ug_token_sampler *s;
 *   ug_token_sampler_create(train, device, &config, &s);
 *   ug_token_sampler_batch(s, UG_TOKEN_TRAIN, step, &batch);  // x, y [B, T]
 *
 * A batch is a function of (seed, stream, index) alone: no generator state
 * is carried from one batch to the next, so a run resumed at step n draws
 * exactly the batches it would have drawn, and evaluation batches 0..k-1
 * are the same k batches every time. The trainer takes token sets whole
 * (ug_trainer_create_tokens, trainer.h).
 *
 * Lifetimes: a token set is reference counted; ranges and samplers keep
 * what they read, so the program may free them in any order. */
#ifndef UNIGRAD_TOKENS_H
#define UNIGRAD_TOKENS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "unigrad/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- token sets ---- */

/* Token ids on the host, each below the set's vocabulary size, which is at
 * most UG_TOKENS_MAX_VOCAB (so an id fits an i32 batch). */
typedef struct ug_tokens ug_tokens;
#define UG_TOKENS_MAX_VOCAB ((int64_t)1 << 31)

/* How a token file is laid out: nothing but ids, each width bytes,
 * unsigned little-endian (numpy's uint8, uint16 or uint32 written with
 * tofile on x86 or ARM: nanoGPT's train.bin is uint16). */
typedef struct ug_token_file {
    int width;            /* bytes per id: 1, 2 or 4 */
    int64_t vocab_size;   /* every id must be below it; 0: the largest id + 1 */
} ug_token_file;

/* Maps the file (read-only, shared with the page cache: a large file costs
 * no heap) and checks it whole: its size a positive multiple of width,
 * every id below the vocabulary size (scanned once, here). A bad file is
 * UG_ERR_FORMAT with the path, the byte offset and what was expected; a
 * file that cannot be read is UG_ERR_IO. */
UG_API ug_status ug_tokens_open(const char *path, const ug_token_file *file, ug_tokens **out);
/* A copy of count ids (each in [0, vocab_size); vocab_size 0: the largest
 * id + 1), held in the smallest width that holds them. */
UG_API ug_status ug_tokens_from_ids(const int32_t *ids, int64_t count, int64_t vocab_size, ug_tokens **out);
/* Writes the set as a token file of width bytes an id (1, 2 or 4; every
 * id must fit), atomically: the path holds the old file or the whole new
 * one. ug_tokens_open reads it back. */
UG_API ug_status ug_tokens_save(const ug_tokens *tokens, const char *path, int width);
/* Tokens [begin, end) of a set (0 <= begin < end <= count), sharing its
 * storage and its vocabulary size. */
UG_API ug_status ug_tokens_range(const ug_tokens *tokens, int64_t begin, int64_t end, ug_tokens **out);
/* A split by position, as nanoGPT's prepare.py makes its train and val
 * files: *first holds the first floor(count * fraction) tokens, *second
 * the rest (fraction 0.9 is data[:int(n*0.9)] and data[int(n*0.9):]).
 * fraction in (0, 1), and both parts non-empty. */
UG_API ug_status ug_tokens_split(const ug_tokens *tokens, double fraction, ug_tokens **first,
                                 ug_tokens **second);
UG_API int64_t ug_tokens_count(const ug_tokens *tokens);
UG_API int64_t ug_tokens_vocab_size(const ug_tokens *tokens);
/* ids[0..count) = tokens [start, start + count). */
UG_API ug_status ug_tokens_read(const ug_tokens *tokens, int64_t start, int64_t count, int32_t *ids);
/* Drops the program's reference; ranges and samplers keep theirs. NULL is
 * ignored. */
UG_API void ug_tokens_free(ug_tokens *tokens);

/* ---- batches of windows ---- */

/* The draws of a sampler: training batches (one per micro-batch of the
 * run, numbered from 0) and evaluation batches (0..eval_iters-1, the same
 * each evaluation), from unrelated streams of the same seed. */
typedef enum ug_token_stream { UG_TOKEN_TRAIN = 0, UG_TOKEN_EVAL = 1 } ug_token_stream;

typedef struct ug_token_sampler_config {
    int64_t batch_size;   /* B: windows a batch */
    int64_t block_size;   /* T: tokens of x (and of y) in a window; the set needs at least T + 1 */
    uint64_t seed;
    ug_dtype dtype;       /* the batches' ids: UG_I32 or UG_I64 */
    /* Sharding, for data-parallel training, as the loader's (data.h):
     * shard i of n takes rows [floor(B W_i / W), floor(B W_i+1 / W)) of
     * every batch, W_i the sum of the weights before it (NULL: equal), so
     * the global batches do not depend on the number of shards. A shard's
     * part may be empty (rows 0). At most 64 shards. */
    int shard_count, shard_index;
    const double *shard_weights;
} ug_token_sampler_config;

/* Defaults: B 12, T 64 (nanoGPT's CPU settings for shakespeare_char),
 * seed 0, i32, not sharded. */
UG_API ug_token_sampler_config ug_token_sampler_defaults(void);

/* Batch index of stream: x [rows, T] and y [rows, T] on the device, y being
 * x one token on (nanoGPT's get_batch: x = data[i:i+T], y =
 * data[i+1:i+T+1]). The tensors belong to the sampler and stay valid until
 * the second ug_token_sampler_batch after this one (two batches are kept,
 * so uploading the next does not wait for the device to finish the last). */
typedef struct ug_token_batch {
    ug_tensor *x, *y;     /* NULL when rows is 0 */
    int64_t rows;         /* this shard's windows */
    int64_t first_row;    /* its first row's place in the global batch */
} ug_token_batch;

typedef struct ug_token_sampler ug_token_sampler;

UG_API ug_status ug_token_sampler_create(const ug_tokens *tokens, ug_device *device,
                                         const ug_token_sampler_config *config, ug_token_sampler **out);
UG_API void ug_token_sampler_free(ug_token_sampler *sampler);
UG_API ug_token_sampler_config ug_token_sampler_get_config(const ug_token_sampler *sampler);
UG_API ug_status ug_token_sampler_batch(ug_token_sampler *sampler, ug_token_stream stream, int64_t index,
                                        ug_token_batch *out);
/* Where the windows of batch index start: offsets[r] for each row r of
 * this shard's part (out->rows of ug_token_sampler_batch). Window row g of
 * the global batch starts at
 *     ((r1 << 32) | r0) mod (count - T),
 * r0 and r1 the first two words of Philox 4x32-10 (kernels/common/random.h,
 * the library's generator) for the counter index * B + g under the key
 * splitmix64(seed ^ stream * 0x9E3779B97F4A7C15) (base/mix64.h): the
 * windows are uniform over the count - T places nanoGPT draws from, up to
 * a bias below (count - T) / 2^64. index is at most (2^64 - 1) / B - 1. */
UG_API ug_status ug_token_sampler_offsets(const ug_token_sampler *sampler, ug_token_stream stream,
                                          int64_t index, int64_t *offsets);
/* New weights for a sharded sampler, from its next batch on (every shard
 * changes at the same batch). Refused for an unsharded sampler or weights
 * that are not positive and finite. */
UG_API ug_status ug_token_sampler_set_shard_weights(ug_token_sampler *sampler, const double *weights);

/* ---- a character vocabulary ---- */

/* nanoGPT's shakespeare_char tokenizer: the symbols are the distinct bytes
 * of a text in increasing order, and a byte's id is its place among them.
 * Bytes, not Unicode characters: a UTF-8 character of several bytes is
 * several tokens (tinyshakespeare is ASCII: 65 symbols). */
typedef struct ug_char_vocab ug_char_vocab;

/* The vocabulary of text (at least one byte). */
UG_API ug_status ug_char_vocab_build(const void *text, size_t bytes, ug_char_vocab **out);
/* Symbols in increasing byte order: ids 0..n-1. */
UG_API ug_status ug_char_vocab_from_symbols(const uint8_t *symbols, int count, ug_char_vocab **out);
UG_API int ug_char_vocab_size(const ug_char_vocab *vocab);
/* The byte of id, or -1 when id is not below the size. */
UG_API int ug_char_vocab_symbol(const ug_char_vocab *vocab, int32_t id);
/* ids[i] = the id of byte i of text. A byte outside the vocabulary is
 * UG_ERR_INVALID_ARGUMENT naming it and its offset. */
UG_API ug_status ug_char_vocab_encode(const ug_char_vocab *vocab, const void *text, size_t bytes, int32_t *ids);
/* text[i] = the byte of ids[i] (count bytes, no terminator added). An id
 * outside the vocabulary is UG_ERR_INVALID_ARGUMENT naming its place. */
UG_API ug_status ug_char_vocab_decode(const ug_char_vocab *vocab, const int32_t *ids, int64_t count, char *text);
/* The encoded text as a token set whose vocabulary size is the vocabulary's. */
UG_API ug_status ug_tokens_from_text(const ug_char_vocab *vocab, const void *text, size_t bytes,
                                     ug_tokens **out);
/* A small JSON file, written atomically, that Python's json module reads:
 *     {"format": "unigrad-char-vocab", "version": 1, "bytes": [10, 32, 33, ...]}
 * the symbols as byte values, in id order. Loading checks everything
 * (those three keys once each, nothing else, the bytes strictly
 * increasing in 0..255, at least one, at most 64 KiB of file) and names
 * the byte offset of what is wrong (UG_ERR_FORMAT). */
UG_API ug_status ug_char_vocab_save(const ug_char_vocab *vocab, const char *path);
UG_API ug_status ug_char_vocab_load(const char *path, ug_char_vocab **out);
UG_API void ug_char_vocab_free(ug_char_vocab *vocab);

#ifdef __cplusplus
}
#endif
#endif
