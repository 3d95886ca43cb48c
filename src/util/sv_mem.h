/*
 * Whether memory is there to be copied: the page walk a NIC does before it reads or
 * writes registered memory. Registration checks ordinary MRs once; an on-demand MR may
 * cover pages that are absent or protected, and an owner may unmap what it registered.
 * Copying there would fault the process where a NIC reports an error completion.
 */
#ifndef SV_MEM_H
#define SV_MEM_H

#include <stdbool.h>
#include <stdint.h>

/* True if every byte of [@addr, @addr + @len) may be read (and written, if @write)
 * now. One system call for the range, none when @len is 0. */
bool sv_mem_accessible(uint64_t addr, uint64_t len, bool write);

#endif
