/* sha256.h — SHA-256 (sha256.c). */
#ifndef TPUC_SHA256_H
#define TPUC_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint32_t h[8];
  uint64_t len;
  unsigned char buf[64];
  size_t nbuf;
} tpuc_sha256;

void tpuc_sha256_init(tpuc_sha256 *s);
void tpuc_sha256_update(tpuc_sha256 *s, const void *data, size_t n);
void tpuc_sha256_final(tpuc_sha256 *s, unsigned char out[32]);

#endif
