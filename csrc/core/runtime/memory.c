/* memory.c — running out of device memory the way PyTorch users expect: a
 * distinct status (TPUC_ERR_OUT_OF_MEMORY, which the glue raises as
 * torch.OutOfMemoryError) whose message says what was requested, what is in
 * use, the peak, the limit and what to try; and an optional limit on tpuc's
 * own accounting ($TPUC_MEMORY_LIMIT, tpuc_memory_set_limit; what
 * torch.tpu.set_per_process_memory_fraction sets), checked before an upload
 * or a launch reaches the plugin. The limit makes out-of-memory reproducible
 * on plugins whose memory is the host's (the XLA CPU plugin, where a failing
 * malloc is the only other signal) and caps a process sharing a device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* "123", "64K", "1.5G", "2GiB" -> bytes; -1 when unreadable. */
static int64_t parse_bytes(const char *v) {
  char *end;
  double n = strtod(v, &end);
  if (end == v || n < 0) return -1;
  while (*end == ' ') end++;
  double mul = 1;
  switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
  }
  if (*end == 'i' || *end == 'I') end++;
  if (*end == 'b' || *end == 'B') end++;
  if (*end) return -1;
  return (int64_t)(n * mul);
}

void tpuc_memory_limit_init(tpuc_runtime *rt) {
  const char *v = getenv("TPUC_MEMORY_LIMIT");
  int64_t limit = v && *v ? parse_bytes(v) : 0;
  if (limit < 0) {
    fprintf(stderr, "tpuc: ignoring TPUC_MEMORY_LIMIT=%s (expected bytes, e.g. 8G or 512M)\n", v);
    limit = 0;
  }
  pthread_mutex_lock(&rt->mem_lock);
  for (int i = 0; i < rt->device_count; i++) rt->devices[i].limit_bytes = limit;
  pthread_mutex_unlock(&rt->mem_lock);
}

tpuc_status *tpuc_memory_set_limit(tpuc_runtime *rt, int device, int64_t bytes) {
  tpuc_status *bad_device = tpuc_device_check(rt, device);
  if (bad_device) return bad_device;
  if (bytes < 0)
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT, "a memory limit of %lld bytes",
                            (long long)bytes);
  pthread_mutex_lock(&rt->mem_lock);
  rt->devices[device].limit_bytes = bytes;
  pthread_mutex_unlock(&rt->mem_lock);
  return NULL;
}

static void human(char *out, size_t n, int64_t bytes) {
  static const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    u++;
  }
  if (u == 0) snprintf(out, n, "%lld bytes", (long long)bytes);
  else snprintf(out, n, "%.2f %s", v, unit[u]);
}

/* "tpu:0: tried to allocate X; Y in use ..., peak Z[, limit L]. <advice>" */
static void describe(tpuc_runtime *rt, int device, int64_t requested, char *out, size_t n) {
  pthread_mutex_lock(&rt->mem_lock);
  tpuc_device_rec *d = &rt->devices[device];
  int64_t in_use = d->bytes_in_use, peak = d->peak_bytes, limit = d->limit_bytes;
  d->num_ooms++;
  pthread_mutex_unlock(&rt->mem_lock);
  char req[64] = "", use[32], pk[32], lim[64] = "";
  if (requested >= 0) {
    char r[32];
    human(r, sizeof r, requested);
    snprintf(req, sizeof req, "tried to allocate %s; ", r);
  }
  human(use, sizeof use, in_use);
  human(pk, sizeof pk, peak);
  if (limit > 0) {
    char l[32];
    human(l, sizeof l, limit);
    snprintf(lim, sizeof lim, ", limit %s", l);
  }
  snprintf(out, n,
           "tpu:%d out of memory: %s%s in use by tensors, peak %s%s. Free tensors you no longer "
           "need (del them; zero_grad(set_to_none=True)), lower the batch size, use activation "
           "checkpointing (torch.utils.checkpoint) or bfloat16, or raise the limit "
           "(TPUC_MEMORY_LIMIT, torch.tpu.set_per_process_memory_fraction); "
           "torch.tpu.memory_summary() shows what is in use",
           device, req, use, pk, lim);
}

tpuc_status *tpuc_memory_admit(tpuc_runtime *rt, int device, int64_t bytes, const char *what) {
  pthread_mutex_lock(&rt->mem_lock);
  const tpuc_device_rec *d = &rt->devices[device];
  bool over = d->limit_bytes > 0 && d->bytes_in_use + bytes > d->limit_bytes;
  pthread_mutex_unlock(&rt->mem_lock);
  if (!over) return NULL;
  char msg[768];
  describe(rt, device, bytes, msg, sizeof msg);
  return tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "%s (%s)", msg, what);
}

tpuc_status *tpuc_oom_explain(tpuc_runtime *rt, int device, tpuc_status *s, int64_t requested) {
  if (tpuc_status_code(s) != TPUC_ERR_OUT_OF_MEMORY || device < 0 || device >= rt->device_count)
    return s;
  const char *m = tpuc_status_message(s);
  if (strstr(m, "torch.tpu.memory_summary()")) return s; /* already explained */
  if (requested < 0) {
    const char *a = strstr(m, "allocating ");
    requested = a ? strtoll(a + 11, NULL, 10) : -1;
    if (requested == 0) requested = -1;
  }
  char msg[768];
  describe(rt, device, requested, msg, sizeof msg);
  tpuc_status *out = tpuc_status_make(TPUC_ERR_OUT_OF_MEMORY, "%s (the plugin: %s)", msg, m);
  tpuc_status_destroy(s);
  return out;
}
