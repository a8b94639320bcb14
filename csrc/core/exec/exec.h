/* exec.h — private definitions of the op engine (storages, the signature
 * cache, view reads and writes). */
#ifndef TPUC_EXEC_H
#define TPUC_EXEC_H

#include <pthread.h>

#include "../ir/ir.h"
#include "../runtime/internal.h"

struct tpuc_storage {
  pthread_mutex_t lock;
  tpuc_runtime *rt;
  int device;
  size_t nbytes;
  tpuc_buffer *buf; /* NULL until written */
};

#endif /* TPUC_EXEC_H */
