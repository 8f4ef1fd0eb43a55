/* The libFuzzer entry point of a fuzz target. libFuzzer calls it with each
 * input; replay.c calls it with every file of a corpus, so the corpus also
 * runs in builds without libFuzzer. It returns 0 and aborts on a bug. */
#ifndef CRUN_TESTS_FUZZ_H
#define CRUN_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
