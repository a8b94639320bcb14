/* op_options.c — the XLA options strict mode's per-op programs are compiled with.
 *
 * A model's first step in strict mode compiles one small program per distinct op
 * signature (a hundred or more), and what the step waits for is their compile time,
 * not their run time. Options that make a small program's compile cheaper, without
 * changing what it computes, can therefore be given to the per-op programs alone,
 * while fused chunks and compiled graphs keep the compiler's defaults.
 *
 *   plugin kind   default per-op options        why
 *   GPU           xla_gpu_autotune_level=0      XLA's GPU compiler times several GEMM
 *                                               and convolution algorithms on the
 *                                               device for every dot it compiles
 *                                               (autotuning); for one dot alone per
 *                                               program that search is most of its
 *                                               compile. Level 0 takes the library's
 *                                               heuristic choice. The result of a
 *                                               GEMM does not depend on its tile
 *                                               choice beyond rounding order.
 *   CPU, TPU      none                          measured on the CPU plugin: cheaper
 *                                               LLVM passes (-O0) change results in
 *                                               the last bits and double the steady
 *                                               step (docs/execution.md); on a TPU
 *                                               not measured.
 *
 * $TPUC_OP_XLA_OPTIONS replaces the default: "name=value[,name=value...]" with the
 * names of xla.DebugOptions fields (the XLA_FLAGS names without the dashes), or
 * "none". The options travel in xla.CompileOptionsProto's env_option_overrides
 * (field 7, map<string, OptionOverrideProto>), which XLA's PJRT clients apply to the
 * program's DebugOptions on top of XLA_FLAGS (CompileOptions::ApplyAllOptionOverrides).
 * Values: true/false -> bool_field (2), an integer -> int_field (3), anything else ->
 * string_field (1), which XLA parses for the field's type. The encoded options are
 * part of the memory and disk cache keys (compile.c), so programs compiled under
 * other options are never mixed. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct {
  unsigned char *bytes;
  size_t len, cap;
  bool full;
} wbuf;

static void put(wbuf *b, const void *p, size_t n) {
  if (b->len + n > b->cap) {
    b->full = true;
    return;
  }
  memcpy(b->bytes + b->len, p, n);
  b->len += n;
}

static void put_varint(wbuf *b, uint64_t v) {
  unsigned char tmp[10];
  size_t n = 0;
  while (v >= 0x80) {
    tmp[n++] = (unsigned char)(v | 0x80);
    v >>= 7;
  }
  tmp[n++] = (unsigned char)v;
  put(b, tmp, n);
}

static size_t varint_len(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

static bool valid_name(const char *s, size_t n) {
  if (n == 0) return false;
  for (size_t i = 0; i < n; i++)
    if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '_'))
      return false;
  return true;
}

/* One map entry {1: name, 2: OptionOverrideProto} of field 7. */
static void put_entry(wbuf *b, const char *name, size_t nlen, const char *val, size_t vlen) {
  char v[256];
  if (vlen >= sizeof v) vlen = sizeof v - 1;
  memcpy(v, val, vlen);
  v[vlen] = 0;
  unsigned char ov[300];
  wbuf o = {ov, 0, sizeof ov, false};
  char *end = NULL;
  errno = 0;
  long long iv = strtoll(v, &end, 10);
  if (!strcmp(v, "true") || !strcmp(v, "false")) {
    put_varint(&o, 2 << 3 | 0);
    put_varint(&o, v[0] == 't');
  } else if (vlen && end && !*end && !errno) {
    put_varint(&o, 3 << 3 | 0);
    put_varint(&o, (uint64_t)iv); /* int64: negatives as ten bytes, as protobuf does */
  } else {
    put_varint(&o, 1 << 3 | 2);
    put_varint(&o, vlen);
    put(&o, v, vlen);
  }
  size_t entry = 1 + varint_len(nlen) + nlen + 1 + varint_len(o.len) + o.len;
  put_varint(b, 7 << 3 | 2);
  put_varint(b, entry);
  put_varint(b, 1 << 3 | 2);
  put_varint(b, nlen);
  put(b, name, nlen);
  put_varint(b, 2 << 3 | 2);
  put_varint(b, o.len);
  put(b, ov, o.len);
  if (o.full) b->full = true;
}

tpuc_status *tpuc_op_options_decide(tpuc_plugin_kind kind, const char *setting,
                                    tpuc_op_options *out) {
  memset(out, 0, sizeof *out);
  const char *spec = setting;
  if (!spec || !*spec) spec = kind == TPUC_PLUGIN_GPU ? "xla_gpu_autotune_level=0" : "none";
  out->from_env = setting && *setting;
  if (!strcmp(spec, "none") || !strcmp(spec, "off")) return NULL;
  wbuf b = {out->bytes, 0, sizeof out->bytes, false};
  size_t tlen = 0;
  for (const char *p = spec; *p;) {
    const char *item = p;
    while (*p && *p != ',') p++;
    const char *stop = p;
    if (*p == ',') p++;
    while (item < stop && isspace((unsigned char)*item)) item++;
    while (stop > item && isspace((unsigned char)stop[-1])) stop--;
    if (item == stop) continue;
    const char *eq = memchr(item, '=', (size_t)(stop - item));
    if (!eq || !valid_name(item, (size_t)(eq - item)) || eq + 1 == stop)
      return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                              "TPUC_OP_XLA_OPTIONS: '%.*s' is not name=value (the name of an "
                              "xla.DebugOptions field, e.g. xla_gpu_autotune_level=0); "
                              "or set it to none",
                              (int)(stop - item), item);
    put_entry(&b, item, (size_t)(eq - item), eq + 1, (size_t)(stop - eq - 1));
    size_t n = (size_t)(stop - item);
    if (tlen + n + 2 > sizeof out->text) b.full = true;
    if (!b.full) {
      if (tlen) out->text[tlen++] = ',';
      memcpy(out->text + tlen, item, n);
      tlen += n;
      out->text[tlen] = 0;
    }
    if (b.full)
      return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                              "TPUC_OP_XLA_OPTIONS: longer than %zu bytes encoded",
                              sizeof out->bytes);
  }
  out->len = b.len;
  return NULL;
}
