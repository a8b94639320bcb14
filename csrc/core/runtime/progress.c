/* progress.c — tells a person waiting on XLA compiles what is happening.
 *
 * A model's first step compiles its programs, and on an accelerator that can
 * take a minute or more (issue 30: a 100M model's first fused step took 74 s
 * on an H200), with nothing on the screen. Every compile (compile.c,
 * compile_uncached: per-op programs, fused chunks, compiled graphs, the
 * compile pool) reports its start and end here. A burst is a run of compiles
 * less than QUIET_S apart. Once a burst has lasted TPUC_COMPILE_PROGRESS
 * seconds (default 10; "off" disables), a watcher thread writes to stderr how
 * many programs are compiled and how many are in flight: a line every
 * TTY_EVERY_S on a terminal, every LOG_EVERY_S elsewhere (a job's log). Whole
 * lines only: the program's own output may come between two of them (a line
 * rewritten in place would run into it). When the burst ends it writes one
 * closing line with the count,
 * the wall time and where the disk cache keeps them, so the next run knows
 * what a warm cache saves. Bursts shorter than the threshold print nothing.
 *
 * Only process 0 of a job writes (process_id 0 of a multi-process client and
 * $RANK 0 or unset: every rank compiles the same programs). The thread starts with the first compile of a burst long enough
 * to matter (never for a runtime that compiles nothing) and sleeps between
 * bursts; tpuc_progress_stop (from tpuc_stop_background_compiles at process
 * exit, and tpuc_runtime_destroy) ends it. A forked child has no thread: its
 * compiles are counted, and nothing is started or joined there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#define DEFAULT_AFTER_S 10.0
#define QUIET_S 2.0      /* no compile for this long: the burst is over */
#define TTY_EVERY_S 5.0  /* a line this often on a terminal */
#define LOG_EVERY_S 15.0 /* and when stderr is not one */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* $TPUC_COMPILE_PROGRESS: "off" -> -1; a number >= 0 -> it; else the default. */
static double threshold(void) {
  const char *v = getenv("TPUC_COMPILE_PROGRESS");
  if (!v || !*v) return DEFAULT_AFTER_S;
  if (!strcmp(v, "off")) return -1;
  char *end = NULL;
  double s = strtod(v, &end);
  return (end && *end) || s < 0 ? DEFAULT_AFTER_S : s;
}

void tpuc_progress_init(tpuc_runtime *rt) {
  tpuc_progress *p = &rt->progress;
  memset(p, 0, sizeof *p);
  pthread_mutex_init(&p->lock, NULL);
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&p->cv, &a);
  pthread_condattr_destroy(&a);
  /* process 0 only: of a multi-process client, and of a torchrun job ($RANK) */
  const char *rank = getenv("RANK");
  bool first = rt->process_id == 0 && (!rank || !*rank || !strcmp(rank, "0"));
  p->after_s = first ? threshold() : -1;
  p->tty = isatty(STDERR_FILENO) == 1;
  p->inited = true;
}

static void wait_until(tpuc_progress *p, double when) {
  struct timespec t;
  t.tv_sec = (time_t)when;
  t.tv_nsec = (long)((when - (double)t.tv_sec) * 1e9);
  int rc = pthread_cond_timedwait(&p->cv, &p->lock, &t);
  (void)rc; /* a timeout or a wake: the loop looks at the state again */
}

/* The closing line of a burst that printed, into `line` (the lock held). */
static void closing_line(const tpuc_runtime *rt, const tpuc_progress *p, char *line, size_t n) {
  if (rt->disk_dir)
    snprintf(line, n,
             "tpuc: compiled %lld XLA programs in %.1f s; the compile cache (%s) keeps them, so "
             "the next run loads them instead\n",
             (long long)p->done, p->last_end - p->start, rt->disk_dir);
  else
    snprintf(line, n,
             "tpuc: compiled %lld XLA programs in %.1f s; the disk cache is off "
             "(TPUC_CACHE_DIR), so the next run compiles them again\n",
             (long long)p->done, p->last_end - p->start);
}

/* Writes a line with the lock released: a stderr that blocks (a full pipe)
 * must not stop the compiles, which take the lock. */
static void put_line(tpuc_progress *p, const char *line) {
  pthread_mutex_unlock(&p->lock);
  fputs(line, stderr);
  fflush(stderr);
  pthread_mutex_lock(&p->lock);
}

static void *watch(void *arg) {
  tpuc_runtime *rt = arg;
  tpuc_progress *p = &rt->progress;
  char line[4600];
  pthread_mutex_lock(&p->lock);
  while (!p->stop) {
    if (!p->in_burst) {
      pthread_cond_wait(&p->cv, &p->lock);
      continue;
    }
    double t = now_s();
    if (!p->in_flight && t - p->last_end >= QUIET_S) { /* the burst is over */
      bool printed = p->printed;
      if (printed) closing_line(rt, p, line, sizeof line);
      p->in_burst = p->printed = false;
      if (printed) put_line(p, line);
      continue;
    }
    double due = p->start + p->after_s;
    double every = p->tty ? TTY_EVERY_S : LOG_EVERY_S;
    if (t >= due && (!p->printed || t - p->last_print >= every)) {
      snprintf(line, sizeof line,
               "tpuc: compiling XLA programs: %lld done in %.0f s, %d in flight\n",
               (long long)p->done, t - p->start, p->in_flight);
      p->printed = true;
      p->last_print = t;
      put_line(p, line);
      continue; /* the state may have changed while the lock was released */
    }
    double next = p->printed ? p->last_print + every : due;
    if (!p->in_flight && p->last_end + QUIET_S < next) next = p->last_end + QUIET_S;
    if (next < t + 0.05) next = t + 0.05;
    wait_until(p, next);
  }
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

void tpuc_progress_begin(tpuc_runtime *rt) {
  tpuc_progress *p = &rt->progress;
  if (!p->inited || p->after_s < 0) return;
  pthread_mutex_lock(&p->lock);
  double t = now_s();
  if (!p->in_burst) {
    p->in_burst = true;
    p->start = t;
    p->done = 0;
    p->last_end = t;
  }
  p->in_flight++;
  if (!p->running && !p->stop && !p->failed) {
    p->pid = getpid();
    p->running = !pthread_create(&p->thread, NULL, watch, rt);
    p->failed = !p->running; /* no thread, no progress lines: compiles go on */
  }
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->lock);
}

void tpuc_progress_end(tpuc_runtime *rt) {
  tpuc_progress *p = &rt->progress;
  if (!p->inited || p->after_s < 0) return;
  pthread_mutex_lock(&p->lock);
  if (p->in_flight > 0) p->in_flight--;
  p->done++;
  p->last_end = now_s();
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->lock);
}

void tpuc_progress_stop(tpuc_runtime *rt) {
  tpuc_progress *p = &rt->progress;
  if (!p->inited) return;
  pthread_mutex_lock(&p->lock);
  p->stop = true;
  pthread_cond_broadcast(&p->cv);
  bool join = p->running && p->pid == getpid(); /* a forked child has no thread */
  p->running = false;
  pthread_mutex_unlock(&p->lock);
  if (join) pthread_join(p->thread, NULL);
  char line[4600];
  pthread_mutex_lock(&p->lock);
  bool printed = p->printed; /* stopped inside a burst that printed: close it */
  if (printed) closing_line(rt, p, line, sizeof line);
  p->printed = false;
  pthread_mutex_unlock(&p->lock);
  if (printed) {
    fputs(line, stderr);
    fflush(stderr);
  }
}

void tpuc_progress_destroy(tpuc_runtime *rt) {
  tpuc_progress *p = &rt->progress;
  if (!p->inited) return;
  tpuc_progress_stop(rt);
  pthread_cond_destroy(&p->cv);
  pthread_mutex_destroy(&p->lock);
  p->inited = false;
}
