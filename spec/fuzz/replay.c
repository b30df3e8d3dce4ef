/* Runs the fuzz harness over files named on the command line (the seed corpus and any
 * crash reproducers), without libFuzzer: the test suite replays the corpus in seconds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
    int replayed = 0;
    for (int i = 1; i < argc; i++) {
        FILE *file = fopen(argv[i], "rb");
        if (!file) {
            fprintf(stderr, "replay: cannot open %s\n", argv[i]);
            return 1;
        }
        fseek(file, 0, SEEK_END);
        long size = ftell(file);
        fseek(file, 0, SEEK_SET);
        uint8_t *data = malloc(size > 0 ? (size_t)size : 1);
        size_t got = data ? fread(data, 1, (size_t)size, file) : 0;
        fclose(file);
        LLVMFuzzerTestOneInput(data, got);
        free(data);
        replayed++;
    }
    printf("replayed %d inputs: %d passed, 0 failed\n", replayed, replayed);
    return 0;
}
