/*
 * goiwarp: obsolete 64-bit byte-order helpers kept for old programs.
 * New code should use htobe64()/be64toh() from <endian.h>.
 */
#ifndef INFINIBAND_ARCH_H
#define INFINIBAND_ARCH_H

#include <stdint.h>
#include <endian.h>

/* Not htobe64(): strict -std=c11 hides it in <endian.h>. */
#if __BYTE_ORDER == __LITTLE_ENDIAN
#define __giw_arch_be64(x) __builtin_bswap64(x)
#else
#define __giw_arch_be64(x) (x)
#endif

#ifndef ntohll
#undef htonll
#undef ntohll
static inline __attribute__((deprecated)) uint64_t htonll(uint64_t x)
{
	return __giw_arch_be64(x);
}
static inline __attribute__((deprecated)) uint64_t ntohll(uint64_t x)
{
	return __giw_arch_be64(x);
}
#define htonll htonll
#define ntohll ntohll
#endif

#undef __giw_arch_be64

#endif /* INFINIBAND_ARCH_H */
