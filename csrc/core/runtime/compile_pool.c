/* compile_pool.c — compiles that run beside the caller: a few worker
 * threads take StableHLO texts from a queue and compile them into the
 * executable caches (memory, and disk when on), so that the op that needs
 * a program later finds it compiled, or waits only for the rest of a compile
 * already under way (compile.c joins a compile in flight instead of starting
 * the same one again).
 *
 * The exec layer submits the program of an op it has recorded but not yet
 * run (strict mode's compile-ahead, exec/ahead.c); nothing here runs a
 * program. A compile's result or error is only put in the cache: the op's own
 * compile, when the op runs, returns the error at the op. PJRT's compile is
 * thread-safe; the workers are started on the first submission and joined
 * by tpuc_runtime_destroy. TPUC_COMPILE_THREADS sets how many (default: the
 * cores this process may use, at most 8; one on the XLA CPU plugin), and
 * TPUC_COMPILE_NICE how far they step back for the caller's own work (a nice
 * value; default 0). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT, pthread_setname_np */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/resource.h>
#include <sys/syscall.h>
#endif

#include "internal.h"

typedef struct job {
  char *text;
  size_t len;
  bool per_op; /* a strict-mode per-op program: compiled with its options */
  struct job *next;
} job;

struct tpuc_compile_pool {
  pthread_mutex_t lock;
  pthread_cond_t work, idle;
  job *head, *tail;
  int queued, running; /* jobs waiting, jobs being compiled */
  bool stop;
  int nthreads;
  pthread_t threads[8];
  tpuc_runtime *rt;
};

static int default_threads(const tpuc_runtime *rt) {
  const char *v = getenv("TPUC_COMPILE_THREADS");
  if (v && *v) {
    int n = atoi(v);
    return n < 1 ? 1 : n > 8 ? 8 : n;
  }
  /* The XLA CPU plugin: one thread. Its compile already spreads LLVM's code
   * generation over its own thread pool (one compile kept 1.3 of 2 cores
   * busy). Measured 2026-12-04 (Xeon, 2 cores): 180 programs, 4.9 s of
   * compile with one thread, 10.7 s summed over two, the same wall time. On
   * 2026-12-05 (EPYC, 2 cores) a C program compiled examples/llama.py's 60
   * programs in 1.93 s with one thread and 1.41 s with two, but in the
   * training process two threads doubled each compile and the first step got
   * slower (Python needs a core too). The gain here is the overlap of
   * recording with compiling (docs/execution.md). */
  if (tpuc_plugin_kind_of(rt->plugin.path) == TPUC_PLUGIN_CPU) return 1;
  int n = tpuc_usable_cores();
  return n > 8 ? 8 : n;
}

int tpuc_compile_pool_threads(const tpuc_runtime *rt) { return default_threads(rt); }

/* The nice value of the workers (Linux: nice is per thread, raising it needs
 * no privilege, the threads a compile starts, LLVM's, inherit it). Under
 * host-first (TPUC_HOST_FIRST=1) the caller computes the first steps' ops on
 * the host's cores while their programs compile, and compiles that take those
 * cores lengthen the step they were meant to spare: at 19 they run on the
 * cycles the step leaves (first_step bench, medium example, AMD EPYC 2 cores,
 * 2026-12-06: first step 2.1 -> 1.25 s, ten steps the same). Not the default:
 * a nice value cannot be lowered again without privilege, and any busy process
 * beside this one (another rank, a DataLoader worker, a test runner) then
 * starves the compiles for as long as it runs (docs/execution.md,
 * "Host-first"). TPUC_COMPILE_NICE=0..19; 0: the caller's priority. */
int tpuc_compile_pool_nice(void) {
  const char *v = getenv("TPUC_COMPILE_NICE");
  if (v && *v) {
    int n = atoi(v);
    return n < 0 ? 0 : n > 19 ? 19 : n;
  }
  return 0;
}

/* On a GPU or TPU plugin a compile takes about a second and compiles run side
 * by side on the host's cores: queuing the ops behind their compiles turns a
 * first step's hundred serial compiles into a few rounds (docs/execution.md,
 * "Compile-ahead"). On the XLA CPU plugin one compile already keeps the cores
 * busy and the queue only overlaps Python's recording (first_step bench: no
 * gain on the small model), while it moves errors to the read that runs the
 * queue: off there unless asked for. */
tpuc_status *tpuc_compile_ahead_decide(tpuc_plugin_kind kind, const char *setting, bool *on) {
  if (!setting || !*setting || !strcmp(setting, "auto")) {
    *on = kind != TPUC_PLUGIN_CPU;
    return NULL;
  }
  if (strcmp(setting, "0") && strcmp(setting, "1"))
    return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                            "TPUC_COMPILE_AHEAD=%s: use 1 (queue ops behind their compiles), 0 "
                            "(compile each at its op) or auto (on but on the XLA CPU plugin)",
                            setting);
  *on = setting[0] == '1';
  return NULL;
}

int tpuc_usable_cores(void) {
  int n = 1;
#ifdef CPU_COUNT
  cpu_set_t set;
  if (!sched_getaffinity(0, sizeof set, &set)) n = CPU_COUNT(&set);
#else
  long c = sysconf(_SC_NPROCESSORS_ONLN);
  if (c > 0) n = (int)c;
#endif
  return n < 1 ? 1 : n;
}

static void *worker(void *arg) {
  struct tpuc_compile_pool *p = arg;
#ifdef __linux__
  pthread_setname_np(pthread_self(), "tpuc-compile"); /* top -H, perf, gdb */
  /* nice is per thread on Linux; raising it needs no privilege. Failing,
   * the compiles run at the caller's priority: still correct. */
  int nice = tpuc_compile_pool_nice();
  if (nice > 0) (void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice);
#endif
  pthread_mutex_lock(&p->lock);
  for (;;) {
    while (!p->head && !p->stop) pthread_cond_wait(&p->work, &p->lock);
    if (!p->head) break; /* stopping, nothing left */
    job *j = p->head;
    p->head = j->next;
    if (!p->head) p->tail = NULL;
    p->queued--;
    p->running++;
    pthread_mutex_unlock(&p->lock);
    tpuc_executable *x = NULL;
    tpuc_status *s = j->per_op ? tpuc_compile_op(p->rt, j->text, j->len, &x)
                               : tpuc_compile(p->rt, j->text, j->len, &x);
    tpuc_status_destroy(s); /* the op's own compile reports it */
    tpuc_executable_release(x);
    free(j->text);
    free(j);
    pthread_mutex_lock(&p->lock);
    p->running--;
    if (!p->head && !p->running) pthread_cond_broadcast(&p->idle);
  }
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

/* The pool, started on first use (under rt->cache_lock). NULL: no threads
 * could be started (then nothing is compiled ahead: still correct). */
static struct tpuc_compile_pool *pool_of(tpuc_runtime *rt) {
  pthread_mutex_lock(&rt->cache_lock);
  struct tpuc_compile_pool *p = rt->compile_pool;
  if (!p && !rt->compile_pool_failed) {
    p = calloc(1, sizeof *p);
    if (p) {
      pthread_mutex_init(&p->lock, NULL);
      pthread_cond_init(&p->work, NULL);
      pthread_cond_init(&p->idle, NULL);
      p->rt = rt;
      int want = default_threads(rt);
      for (int i = 0; i < want; i++)
        if (!pthread_create(&p->threads[p->nthreads], NULL, worker, p)) p->nthreads++;
      if (!p->nthreads) {
        pthread_cond_destroy(&p->work);
        pthread_cond_destroy(&p->idle);
        pthread_mutex_destroy(&p->lock);
        free(p);
        p = NULL;
      }
    }
    rt->compile_pool = p;
    rt->compile_pool_failed = !p;
  }
  pthread_mutex_unlock(&rt->cache_lock);
  return p;
}

bool tpuc_compile_submit(tpuc_runtime *rt, const char *text, size_t len, bool per_op) {
  struct tpuc_compile_pool *p = pool_of(rt);
  if (!p) return false;
  job *j = malloc(sizeof *j);
  char *copy = malloc(len ? len : 1);
  if (!j || !copy) {
    free(j);
    free(copy);
    return false;
  }
  memcpy(copy, text, len);
  j->text = copy;
  j->per_op = per_op;
  j->len = len;
  j->next = NULL;
  pthread_mutex_lock(&p->lock);
  if (p->stop) { /* tpuc_compile_pool_stop ran */
    pthread_mutex_unlock(&p->lock);
    free(copy);
    free(j);
    return false;
  }
  if (p->tail) p->tail->next = j;
  else p->head = j;
  p->tail = j;
  p->queued++;
  pthread_cond_signal(&p->work);
  pthread_mutex_unlock(&p->lock);
  pthread_mutex_lock(&rt->cache_lock);
  rt->compiles_submitted++;
  pthread_mutex_unlock(&rt->cache_lock);
  return true;
}

int tpuc_compile_pool_busy(tpuc_runtime *rt) {
  pthread_mutex_lock(&rt->cache_lock);
  struct tpuc_compile_pool *p = rt->compile_pool;
  pthread_mutex_unlock(&rt->cache_lock);
  if (!p) return 0;
  pthread_mutex_lock(&p->lock);
  int n = p->queued + p->running;
  pthread_mutex_unlock(&p->lock);
  return n;
}

void tpuc_compile_pool_stop(tpuc_runtime *rt) {
  pthread_mutex_lock(&rt->cache_lock);
  struct tpuc_compile_pool *p = rt->compile_pool;
  rt->compile_pool_failed = true; /* none is started after this: compiles run on their caller */
  pthread_mutex_unlock(&rt->cache_lock);
  if (!p) return;
  pthread_mutex_lock(&p->lock);
  for (job *j = p->head, *next; j; j = next) { /* not started: dropped */
    next = j->next;
    free(j->text);
    free(j);
  }
  p->head = p->tail = NULL;
  p->queued = 0;
  p->stop = true;
  int n = p->nthreads; /* joined here, once (a second stop joins none) */
  p->nthreads = 0;
  pthread_cond_broadcast(&p->work);
  pthread_mutex_unlock(&p->lock);
  for (int i = 0; i < n; i++) pthread_join(p->threads[i], NULL);
}

void tpuc_compile_pool_destroy(tpuc_runtime *rt) {
  tpuc_compile_pool_stop(rt);
  struct tpuc_compile_pool *p = rt->compile_pool;
  if (!p) return;
  pthread_cond_destroy(&p->work);
  pthread_cond_destroy(&p->idle);
  pthread_mutex_destroy(&p->lock);
  free(p);
  rt->compile_pool = NULL;
}
