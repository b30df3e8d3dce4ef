/* mil/milblob.c by reference: a writer that leaves large blobs' data where it lies gives the
 * same file, byte for byte, as one that copies it (gathered with ane_mil_file_copy); the
 * reader walks both to the same records; a lookup of a borrowed blob returns the caller's own
 * bytes (no copy) and of a small or copied one the writer's; a derived blob's piece names its
 * origin (and only its piece does); and the reader refuses ranges that cross from one piece
 * into the next instead of reading past a piece. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ane_core/mil/milblob.h"
#include "check.h"

enum { BIG = 4 * ANE_MILBLOB_BORROW_MIN + 10, SMALL = 100 };

int main(void) {
    static uint8_t big[BIG], other[BIG];
    uint8_t small[SMALL];
    for (size_t i = 0; i < sizeof big; i++) big[i] = (uint8_t)(i * 7 + 1), other[i] = (uint8_t)(i * 13 + 5);
    for (size_t i = 0; i < sizeof small; i++) small[i] = (uint8_t)(200 - i);

    ane_milblob_writer copied, by_reference;
    ane_milblob_writer_init(&copied);
    ane_milblob_writer_init_by_reference(&by_reference);
    uint64_t offsets[2][5];
    static const int origin = 0; /* (what a derived blob was made from: only its address matters) */
    ane_error err;
    ane_milblob_writer *writers[2] = {&copied, &by_reference};
    for (int w = 0; w < 2; w++) {
        CHECK(!ane_milblob_add_borrowed(writers[w], MILBLOB_FLOAT16, big, sizeof big, &offsets[w][0], &err), "big");
        CHECK(!ane_milblob_add_borrowed(writers[w], MILBLOB_UINT8, small, sizeof small, &offsets[w][1], &err), "small");
        CHECK(!ane_milblob_add(writers[w], MILBLOB_INT8, other, sizeof other, &offsets[w][2], &err), "copied");
        CHECK(!ane_milblob_add_borrowed(writers[w], MILBLOB_FLOAT32, other, 4 * ANE_MILBLOB_BORROW_MIN, &offsets[w][3], &err),
              "aligned");
        uint8_t *derived = malloc(sizeof big); /* (each writer's own: it frees it) */
        CHECK(derived != NULL, "malloc");
        memcpy(derived, big, sizeof big);
        CHECK(!ane_milblob_add_derived(writers[w], MILBLOB_UINT8, derived, sizeof big, &origin, 7, &offsets[w][4], &err),
              "derived");
    }
    for (int i = 0; i < 5; i++) CHECK(offsets[0][i] == offsets[1][i], "blob %d at the same offset in both files", i);

    ane_mil_file whole, pieces;
    CHECK(!ane_milblob_writer_file(&copied, "w.bin", &whole, &err), "the copied file");
    CHECK(!ane_milblob_writer_file(&by_reference, "w.bin", &pieces, &err), "the file by reference");
    CHECK(whole.bytes && !pieces.bytes && pieces.npieces > 1, "one run / %d pieces", pieces.npieces);
    CHECK(whole.size == pieces.size, "sizes %zu / %zu", whole.size, pieces.size);
    CHECK(by_reference.bytes.length < sizeof other + SMALL + 16 * ANE_MILBLOB_ALIGN,
          "the writer by reference holds %zu bytes of its own: the copied blob and the records, not the borrowed data",
          by_reference.bytes.length);
    uint8_t *gathered = malloc(pieces.size);
    ane_mil_file_copy(&pieces, gathered);
    CHECK(memcmp(gathered, whole.bytes, whole.size) == 0, "the pieces gathered are the copied file, byte for byte");
    uint64_t covered = 0;
    for (int i = 0; i < pieces.npieces; i++) {
        CHECK(pieces.pieces[i].offset == covered, "piece %d starts where the one before ends", i);
        covered += pieces.pieces[i].size;
    }
    CHECK(covered == pieces.size, "the pieces cover the file");

    ane_milblob_record *a, *b;
    int na, nb;
    CHECK(!ane_milblob_parse(&whole, "w.bin", &a, &na, NULL, &err), "parse the copied file");
    CHECK(!ane_milblob_parse(&pieces, "w.bin", &b, &nb, NULL, &err), "parse the pieces: %s", err.message);
    CHECK(na == 5 && nb == 5, "5 records each, got %d and %d", na, nb);
    for (int i = 0; i < 5 && i < na && i < nb; i++)
        CHECK(a[i].record_offset == b[i].record_offset && a[i].code == b[i].code && a[i].size == b[i].size &&
                  a[i].data_offset == b[i].data_offset,
              "record %d read the same from both", i); /* (field by field: the struct's padding is no record's) */
    free(a);
    free(b);

    const uint8_t *data;
    CHECK(!ane_milblob_lookup(&pieces, "w.bin", offsets[1][0], MILBLOB_FLOAT16, sizeof big, &data, NULL, &err), "big");
    CHECK(data == big, "a borrowed blob is read where it lies");
    CHECK(!ane_milblob_lookup(&pieces, "w.bin", offsets[1][1], MILBLOB_UINT8, sizeof small, &data, NULL, &err), "small");
    CHECK(data != small && !memcmp(data, small, sizeof small), "a small blob is the writer's copy");
    CHECK(!ane_milblob_lookup(&pieces, "w.bin", offsets[1][2], MILBLOB_INT8, sizeof other, &data, NULL, &err), "copied");
    CHECK(data != other && !memcmp(data, other, sizeof other), "a blob added as a copy is copied");
    CHECK(!ane_milblob_lookup(&pieces, "w.bin", offsets[1][3], MILBLOB_FLOAT32, 4 * ANE_MILBLOB_BORROW_MIN, &data, NULL, &err),
          "aligned");
    CHECK(data == other, "a borrowed blob of whole 64-byte lines, with no padding after it, too");

    /* the MIL's type asking for more than the borrowed piece holds: refused, not read on */
    CHECK(ane_milblob_lookup(&pieces, "w.bin", offsets[1][0], MILBLOB_FLOAT16, sizeof big + 8, &data, NULL, &err) != ANE_OK,
          "a range across two pieces is refused");
    CHECK(strstr(err.message, "cross from one piece of the file into the next") != NULL, "says why: %s", err.message);
    CHECK(ane_milblob_lookup(&whole, "w.bin", offsets[0][0], MILBLOB_FLOAT16, sizeof big + 8, &data, NULL, &err) == ANE_OK,
          "(the copied file reads on into the padding, as the device would)");
    CHECK(ane_mil_file_range(&pieces, pieces.size - 1, 2) == NULL, "a range past the end");
    const uint8_t *last = ane_mil_file_range(&pieces, pieces.size - 4, 4);
    CHECK(last && !memcmp(last, whole.bytes + whole.size - 4, 4), "the last bytes, from the last piece");

    const ane_mil_piece *piece = ane_mil_file_piece(&pieces, offsets[1][4] + ANE_MILBLOB_ALIGN, sizeof big);
    CHECK(piece && piece->origin == &origin && piece->origin_kind == 7 && piece->size == sizeof big &&
              piece->offset == offsets[1][4] + ANE_MILBLOB_ALIGN && !memcmp(piece->bytes, big, sizeof big),
          "the derived blob's piece: its bytes, naming its origin");
    piece = ane_mil_file_piece(&pieces, offsets[1][0] + ANE_MILBLOB_ALIGN, sizeof big);
    CHECK(piece && !piece->origin && piece->bytes == big, "a borrowed blob's piece names none");
    CHECK(ane_mil_file_piece(&whole, offsets[0][4] + ANE_MILBLOB_ALIGN, sizeof big) == NULL,
          "a file in one run has no pieces (the copying writer kept the derived bytes, not their origin)");
    free(gathered);
    ane_milblob_writer_free(&copied);
    ane_milblob_writer_free(&by_reference);
    return check_summary("milblob_pieces");
}
