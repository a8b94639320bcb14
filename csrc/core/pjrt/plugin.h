/* plugin.h — a loaded PJRT plugin (plugin.c): loading and initialising it
 * once per process, looking up the slots of its function table, and turning
 * its errors into tpuc statuses. Private to the core. */
#ifndef TPUC_PLUGIN_H
#define TPUC_PLUGIN_H

#include "../base/base.h"
#include "pjrt_abi.h"

typedef struct tpuc_plugin {
  const pj_api *api;
  char *path;
  int api_major, api_minor;
} tpuc_plugin;

/* Loads (once per process) and initialises the plugin at `path`. */
tpuc_status *tpuc_plugin_load(const char *path, tpuc_plugin *out);
void tpuc_plugin_unload(tpuc_plugin *p); /* frees tpuc's copy; never dlclose */
/* The function in `slot`, or NULL when the plugin's table is too short. */
void *tpuc_plugin_fn(const tpuc_plugin *p, pj_slot slot);
/* Converts (and destroys) a PJRT error; NULL stays NULL. */
tpuc_status *tpuc_plugin_error(const tpuc_plugin *p, pj_error *err, const char *what);
/* A status naming a slot the plugin lacks. */
tpuc_status *tpuc_plugin_missing(const tpuc_plugin *p, const char *what);

/* Declares `var`, the function in slot `slot` (a pj_slot) taking `args_t *`,
 * or returns a status from the enclosing function when the plugin lacks it. */
#define PJ_FN(p, slot, args_t, var)                                     \
  pj_error *(*var)(args_t *) = (pj_error * (*)(args_t *)) tpuc_plugin_fn((p), (slot)); \
  if (!var) return tpuc_plugin_missing((p), #slot)

typedef pj_error *(*pj_generic_fn)(void *args);

#endif /* TPUC_PLUGIN_H */
