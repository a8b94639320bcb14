/* preload.c — the disk cache read ahead: when a runtime starts with a disk
 * tier, one background thread loads the executables the directory holds into
 * the memory cache, so that the op that first needs a program finds it in
 * memory, or waits for the load already in flight (compile.c's join), instead
 * of reading and loading the file itself on the critical path.
 *
 * Order: most recently used first. A file's mtime is set on every use (a
 * compile's write, a load, the first use of a preloaded program) to the start
 * of the burst of uses it is in (uses less than a second apart, as a first
 * step's are) less a microsecond per use before it in the burst
 * (tpuc_disk_touch), so the newest files are the last burst's programs in the
 * order it first needed them -- the order the next run of the same job needs
 * them in -- then the burst before it, and so on.
 *
 * How many: a window. The loaders pause while TPUC_CACHE_PRELOAD programs
 * (default 256; "0"/"off" disables the preload) they loaded or are loading
 * are unused, and go on as the process uses them; so a process that runs
 * other programs than the last one pays for at most a window of loads, and
 * one that reruns a job stays a window ahead of it. They also stop at
 * TPUC_CACHE_PRELOAD_MAX_MB (default 256) of files, newest first.
 *
 * How fast: the thread scans the directory, then loads with helpers beside it
 * (TPUC_CACHE_PRELOAD_THREADS loaders in all; default one core fewer than
 * this process may use, at least 1, at most 4: the process's own thread, which
 * records the step, keeps a core). Each loader claims the next file of the
 * list, newest first, so the order holds up to the loads in flight. Measured
 * on a 2-core machine: the 60 programs of examples/llama.py's small first step
 * load in 76 ms with one loader and 53 ms with two when nothing else runs
 * (a C program); in the training process itself two loaders took the second
 * core from Python, and model setup plus first step got no faster (strict
 * and fused), so such a machine keeps one. An op asking for a program a
 * loader is loading waits for that load (compile.c's join), as before.
 *
 * Only files of format 2 (disk_cache.c: they hold the program text and its
 * compile options, from which the memory key is computed) whose key is this
 * runtime's key for that text are loaded; format-1 files, and those of another
 * plugin, device kind or XLA_FLAGS sharing the directory, are left as they are.
 * A malformed file, or one the plugin refuses, is removed (disk_corrupt), as a
 * load on demand does. tpuc_preload_stop (from tpuc_stop_background_compiles,
 * at process exit, and tpuc_runtime_destroy) ends the thread after the load it
 * is in: a load (XLA CPU: an LLVM link) must not run into the exit handlers. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define DEFAULT_WINDOW 256
#define DEFAULT_MAX_MB 256
#define MAX_LOADERS 8
#define DEFAULT_MAX_LOADERS 4

typedef struct {
  char name[69]; /* 64 hex digits + ".tpx" */
  struct timespec mtime;
  int64_t size;
  ino_t ino;
} file_rec;

static int newest_first(const void *a, const void *b) {
  const file_rec *x = a, *y = b;
  if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? 1 : -1;
  if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? 1 : -1;
  return strcmp(x->name, y->name);
}

static bool entry_name(const char *n) {
  size_t l = strlen(n);
  if (l != 68 || strcmp(n + 64, ".tpx")) return false;
  for (int i = 0; i < 64; i++)
    if (!((n[i] >= '0' && n[i] <= '9') || (n[i] >= 'a' && n[i] <= 'f'))) return false;
  return true;
}

/* The directory's entries, newest first, cut at the bytes cap. */
static file_rec *choose(const tpuc_runtime *rt, size_t *count) {
  *count = 0;
  DIR *d = opendir(rt->disk_dir);
  if (!d) return NULL;
  file_rec *fs = NULL;
  size_t n = 0, cap = 0;
  char path[4400];
  for (struct dirent *de; (de = readdir(d));) {
    if (!entry_name(de->d_name)) continue;
    snprintf(path, sizeof path, "%s/%s", rt->disk_dir, de->d_name);
    struct stat st;
    if (stat(path, &st) || !S_ISREG(st.st_mode)) continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 256;
      file_rec *nf = realloc(fs, cap * sizeof *nf);
      if (!nf) break;
      fs = nf;
    }
    memcpy(fs[n].name, de->d_name, sizeof fs[n].name);
    fs[n].mtime = st.st_mtim;
    fs[n].size = st.st_size;
    fs[n].ino = st.st_ino;
    n++;
  }
  closedir(d);
  if (!n) return fs;
  qsort(fs, n, sizeof *fs, newest_first);
  int64_t bytes = 0;
  size_t k = 0;
  while (k < n && bytes + fs[k].size <= rt->preload_max_bytes) bytes += fs[k++].size;
  *count = k;
  return fs;
}

static int hexval(char c) { return c <= '9' ? c - '0' : c - 'a' + 10; }

/* Loads one file into the memory cache unless it is there or in flight. */
static void preload_file(tpuc_runtime *rt, const file_rec *f) {
  char path[4400];
  snprintf(path, sizeof path, "%s/%s", rt->disk_dir, f->name);
  size_t len = 0;
  unsigned char *buf = tpuc_read_whole_file(path, &len);
  if (!buf) return; /* evicted or replaced meanwhile */
  unsigned char key[32], again[32];
  for (int i = 0; i < 32; i++)
    key[i] = (unsigned char)(hexval(f->name[2 * i]) << 4 | hexval(f->name[2 * i + 1]));
  tpuc_disk_entry e;
  bool bad = !tpuc_disk_parse(buf, len, &e) || memcmp(e.key, key, 32);
  if (!bad && e.version >= 2) {
    /* the text must be this runtime's: another plugin's file has another key */
    tpuc_disk_key(rt, e.text, e.text_len, e.opts, e.opts_len, again);
    bad = !memcmp(again, key, 32) &&
          tpuc_cache_preload(rt, e.text, e.text_len, e.opts, e.opts_len, key, e.payload,
                             e.payload_len) < 0;
  }
  free(buf);
  /* removed unless an op has written a good one in its place meanwhile (a new inode) */
  struct stat st;
  if (bad && !stat(path, &st) && st.st_ino == f->ino) tpuc_disk_remove_bad(rt, path);
}

/* The list the loaders share: `next` under the runtime's cache_lock. */
typedef struct {
  tpuc_runtime *rt;
  file_rec *fs;
  size_t n, next;
} load_list;

/* Claims the next file (its index in *i); false once stopping or at the end.
 * Waits while the window is full, counting the loads in flight, so that N
 * loaders never hold more than the window loaded and unused. */
static bool claim(load_list *l, size_t *i) {
  tpuc_runtime *rt = l->rt;
  pthread_mutex_lock(&rt->cache_lock);
  while (!atomic_load(&rt->preload_stop) && l->next < l->n &&
         rt->preloaded + rt->preload_loading - rt->preload_used >= rt->preload_window)
    pthread_cond_wait(&rt->preload_cv, &rt->cache_lock);
  bool go = !atomic_load(&rt->preload_stop) && l->next < l->n;
  if (go) {
    *i = l->next++;
    rt->preload_loading++;
  }
  pthread_mutex_unlock(&rt->cache_lock);
  return go;
}

static void *loader(void *arg) {
  load_list *l = arg;
  tpuc_runtime *rt = l->rt;
  for (size_t i; claim(l, &i);) {
    preload_file(rt, &l->fs[i]);
    pthread_mutex_lock(&rt->cache_lock);
    rt->preload_loading--;
    pthread_cond_broadcast(&rt->preload_cv); /* tpuc_preload_wait; a paused loader */
    pthread_mutex_unlock(&rt->cache_lock);
  }
  return NULL;
}

static void *preload_main(void *arg) {
  tpuc_runtime *rt = arg;
  load_list l = {rt, NULL, 0, 0};
  l.fs = choose(rt, &l.n);
  pthread_t helpers[MAX_LOADERS];
  int started = 0;
  /* helpers beside this thread, no more than files; none that fail to start */
  for (int k = 1; k < rt->preload_threads && (size_t)k < l.n; k++)
    if (!pthread_create(&helpers[started], NULL, loader, &l)) started++;
  loader(&l);
  for (int k = 0; k < started; k++) pthread_join(helpers[k], NULL);
  free(l.fs);
  pthread_mutex_lock(&rt->cache_lock);
  rt->preload_done = true;
  pthread_cond_broadcast(&rt->preload_cv);
  pthread_mutex_unlock(&rt->cache_lock);
  return NULL;
}

/* TPUC_CACHE_PRELOAD_THREADS, or one fewer than the cores this process may
 * use (at most DEFAULT_MAX_LOADERS); 1..MAX_LOADERS. */
static int loaders(void) {
  const char *v = getenv("TPUC_CACHE_PRELOAD_THREADS");
  int n = v && *v ? atoi(v) : 0;
  if (n <= 0) {
    int cores = tpuc_usable_cores();
    n = cores - 1 > DEFAULT_MAX_LOADERS ? DEFAULT_MAX_LOADERS : cores - 1;
  }
  return n < 1 ? 1 : n > MAX_LOADERS ? MAX_LOADERS : n;
}

/* "0"/"off": 0; "1"/"on"/unset/unreadable: the default; N > 1: N. */
static int64_t window(void) {
  const char *v = getenv("TPUC_CACHE_PRELOAD");
  if (!v || !*v || !strcmp(v, "on") || !strcmp(v, "1")) return DEFAULT_WINDOW;
  if (!strcmp(v, "off")) return 0;
  char *end = NULL;
  long long n = strtoll(v, &end, 10);
  return (end && *end) || n < 0 ? DEFAULT_WINDOW : n;
}

void tpuc_preload_start(tpuc_runtime *rt, int setting) {
  pthread_mutex_init(&rt->preload_lock, NULL);
  pthread_cond_init(&rt->preload_cv, NULL);
  rt->preload_inited = true;
  rt->preload_done = true; /* until a thread runs */
  atomic_init(&rt->preload_stop, false);
  if (!rt->disk_dir || setting < 0) return;
  rt->preload_window = setting > 0 ? setting : window();
  rt->preload_threads = loaders();
  const char *mb = getenv("TPUC_CACHE_PRELOAD_MAX_MB");
  rt->preload_max_bytes = (mb && *mb ? atoll(mb) : DEFAULT_MAX_MB) << 20;
  if (rt->preload_window <= 0 || rt->preload_max_bytes <= 0) return;
  rt->preload_done = false;
  rt->preload_pid = getpid();
  /* no thread: no preload, every program loads on demand as before */
  rt->preload_running = !pthread_create(&rt->preload_thread, NULL, preload_main, rt);
  if (!rt->preload_running) rt->preload_done = true; /* (else the thread says when) */
}

static void join(tpuc_runtime *rt) {
  pthread_mutex_lock(&rt->preload_lock);
  /* a forked child has no such thread: nothing to join there */
  if (rt->preload_running && rt->preload_pid == getpid()) pthread_join(rt->preload_thread, NULL);
  rt->preload_running = false;
  pthread_mutex_unlock(&rt->preload_lock);
}

void tpuc_preload_wait(tpuc_runtime *rt) {
  if (!rt->preload_inited) return;
  pthread_mutex_lock(&rt->cache_lock);
  /* the window full of loaded programs, and no load in flight. (Not "a loader
   * found the window full": a load that has ended counts in `preloaded` a
   * moment before it leaves `preload_loading`, so a loader could find the
   * window full and, once those loads left, the window would not be.) */
  while (!rt->preload_done &&
         !(!rt->preload_loading && rt->preloaded - rt->preload_used >= rt->preload_window))
    pthread_cond_wait(&rt->preload_cv, &rt->cache_lock);
  pthread_mutex_unlock(&rt->cache_lock);
}

void tpuc_preload_stop(tpuc_runtime *rt) {
  if (!rt->preload_inited) return;
  pthread_mutex_lock(&rt->cache_lock);
  atomic_store(&rt->preload_stop, true);
  pthread_cond_broadcast(&rt->preload_cv); /* a paused thread ends now */
  pthread_mutex_unlock(&rt->cache_lock);
  join(rt);
}

void tpuc_preload_destroy(tpuc_runtime *rt) {
  if (!rt->preload_inited) return;
  tpuc_preload_stop(rt);
  pthread_cond_destroy(&rt->preload_cv);
  pthread_mutex_destroy(&rt->preload_lock);
  rt->preload_inited = false;
}
