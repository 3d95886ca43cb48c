/* What the codec fuzz targets share: libFuzzer's entry point, and CHECK, a property that
 * must hold whatever the input (abort: libFuzzer keeps the input that broke it). */
#ifndef FUZZ_CHECK_H
#define FUZZ_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c)                  \
	do {                      \
		if (!(c))         \
			abort();  \
	} while (0)

#endif
