/* kv_bridge.h — PJRT's key-value callbacks of client creation, implemented on
 * a tpuc_kv_store (kv_bridge.c). Private to the core. */
#ifndef TPUC_KV_BRIDGE_H
#define TPUC_KV_BRIDGE_H

#include "pjrt_abi.h"
#include "tpuc.h"

/* Sets the three key-value callbacks of `a` (get, try_get, put) to call `kv`,
 * which must stay valid while the client lives (the runtime holds a copy). */
void tpuc_kv_bridge_attach(const tpuc_kv_store *kv, pj_client_create_args *a);

/* The callbacks themselves (tests call them as a plugin would). */
pj_error *tpuc_kv_bridge_get(pj_kv_get_args *a);
pj_error *tpuc_kv_bridge_try_get(pj_kv_try_get_args *a);
pj_error *tpuc_kv_bridge_put(pj_kv_put_args *a);

#endif /* TPUC_KV_BRIDGE_H */
