/* op_run.c — running one ATen op: signature cache, program building, launch.
 * (Placeholder until the engine lands: every op reports UNIMPLEMENTED.) */
#include <string.h>

#include "../runtime/internal.h"
#include "exec.h"

const tpuc_op *tpuc_op_find(tpuc_runtime *rt, const char *name) {
  (void)rt;
  (void)name;
  return NULL;
}

int tpuc_op_count(tpuc_runtime *rt) {
  (void)rt;
  return 0;
}

const char *tpuc_op_name(tpuc_runtime *rt, int i) {
  (void)rt;
  (void)i;
  return NULL;
}

tpuc_status *tpuc_op_run(tpuc_runtime *rt, const tpuc_op_call *call, bool wait) {
  (void)rt;
  (void)call;
  (void)wait;
  return tpuc_status_make(TPUC_ERR_UNIMPLEMENTED, "no lowering");
}

void tpuc_op_stats_get(tpuc_runtime *rt, tpuc_op_stats *out) {
  (void)rt;
  memset(out, 0, sizeof *out);
}
