/*
 * libFuzzer target for the IB CM's MAD decoder (src/wire/roce/rv_cm.c) and rdma_cm's
 * header: whatever the bytes, no access outside them (ASan, UBSan); a MAD that decodes
 * encodes again, and decodes to the same message; a header that reads reads the same
 * once written again.
 *
 * Build and run: tests/fuzz/build.sh OUTDIR fuzz_rv_cm, then
 *   OUTDIR/fuzz_rv_cm -max_total_time=60
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/roce/rv_cm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rv_cm_msg m, m2;
	struct rv_cma_hdr h, h2;
	uint8_t again[RV_MAD_LEN], hb[RV_CMA_HDR];

	if (!rv_cm_decode(data, size, &m)) {
		if (rv_cm_encode(&m, again) || rv_cm_decode(again, sizeof(again), &m2) ||
		    memcmp(&m, &m2, sizeof(m)))
			abort();
		if ((m.attr == RV_CM_REQ || m.attr == RV_CM_SIDR_REQ) &&
		    !rv_cma_hdr_get(m.private_data, m.private_len, &h)) {
			rv_cma_hdr_put(&h, hb);
			if (rv_cma_hdr_get(hb, sizeof(hb), &h2) || memcmp(&h, &h2, sizeof(h)))
				abort();
		}
	}
	return 0;
}
