/* fused_seen.c — the pending chunk's map from an op's signature to its last
 * position (an open-addressing table in the per-device pending state), which
 * fused.c consults to recognise loops and fused_replay.c rebuilds when it
 * stops matching a recorded chunk. */
#include <stdlib.h>
#include <string.h>

#include "fused.h"

/* Records that `sig` is at position `pos`; returns its previous position in
 * the chunk, or -1. */
int fused_seen_put(pending *pd, uint64_t sig, int pos) {
  if (sig == 0) sig = 1;
  if (2 * (pd->seen_n + 1) > pd->seen_cap) {
    int cap = pd->seen_cap ? pd->seen_cap * 2 : 1024;
    uint64_t *ns = calloc((size_t)cap, sizeof *ns);
    int *np = malloc((size_t)cap * sizeof *np);
    if (!ns || !np) {
      free(ns);
      free(np);
      return -1;
    }
    for (int i = 0; i < pd->seen_cap; i++)
      if (pd->seen[i])
        for (int j = (int)(pd->seen[i] % (uint64_t)cap);; j = (j + 1) % cap)
          if (!ns[j]) {
            ns[j] = pd->seen[i];
            np[j] = pd->seen_pos[i];
            break;
          }
    free(pd->seen);
    free(pd->seen_pos);
    pd->seen = ns;
    pd->seen_pos = np;
    pd->seen_cap = cap;
  }
  for (int j = (int)(sig % (uint64_t)pd->seen_cap);; j = (j + 1) % pd->seen_cap) {
    if (pd->seen[j] == sig) {
      int prev = pd->seen_pos[j];
      pd->seen_pos[j] = pos;
      return prev;
    }
    if (!pd->seen[j]) {
      pd->seen[j] = sig;
      pd->seen_pos[j] = pos;
      pd->seen_n++;
      return -1;
    }
  }
}

void fused_seen_clear(pending *pd) {
  if (pd->seen) memset(pd->seen, 0, (size_t)pd->seen_cap * sizeof *pd->seen);
  pd->seen_n = 0;
}

void fused_seen_rebuild(pending *pd) {
  fused_seen_clear(pd);
  for (int i = 0; i < pd->n; i++) fused_seen_put(pd, pd->recs[i].sig, i);
}

void fused_seen_free(pending *pd) {
  free(pd->seen);
  free(pd->seen_pos);
}
