/* disk_cache.c — the disk tier of the executable cache: serialized
 * executables under a directory (TPUC_CACHE_DIR, default ~/.cache/tpuc; "off"
 * disables it), so that a new process skips compiling what an earlier one
 * compiled.
 *
 * A file is named by the SHA-256 of (program text, compile options, platform
 * name and version, PJRT API version, the plugin's XLA version, the device
 * kind, on the XLA CPU plugin the host CPU's flags, $XLA_FLAGS) and holds a header (magic, that key,
 * body length, body checksum) followed by the body. Format 2 ("TPUCEXE2"):
 * the body is the program text's and the compile options' lengths (two
 * little-endian u64), the text, the options, then the plugin's serialized
 * executable -- the text is what the memory cache is keyed by, so preload.c can
 * load a file without being asked for its program. Format 1 ("TPUCEXE1", tpuc
 * before the preload): the body is the executable alone; such a file still
 * loads on demand and is rewritten as format 2 then (the program is at hand).
 * Writes go to a temporary file that is renamed into place, so
 * readers in other processes see a whole file or none. A file that fails any
 * check (truncated, corrupt, another key) is removed and the program is
 * compiled again. The directory is bounded by TPUC_CACHE_MAX_BYTES (default
 * 4 GiB) with least-recently-used eviction: a hit refreshes the file's mtime.
 *
 * Processes sharing the directory compile each program once: on a miss a
 * compiler takes an exclusive flock on "<key>.lock" and looks again before
 * compiling, so the ranks of one job on one host (which all start with the
 * same programs) wait for the first one's compile and load its file instead
 * of each compiling it (on a 2-core host 4 ranks compiling the same ~370
 * programs at once took 4x the CPU of one). The kernel drops a dead
 * process's lock; the holder removes the lock file when done. */
#define _DEFAULT_SOURCE /* flock (BSD, in glibc and macOS) next to _POSIX_C_SOURCE */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "sha256.h"

#define MAGIC1 "TPUCEXE1"
#define MAGIC2 "TPUCEXE2"
#define HEADER_SIZE (8 + 32 + 8 + 8)
#define DEFAULT_MAX_BYTES (4ll << 30)

static int mkdirs(const char *path) {
  char tmp[4096];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof tmp) return -1;
  memcpy(tmp, path, n + 1);
  for (char *p = tmp + 1; *p; p++)
    if (*p == '/') {
      *p = 0;
      if (mkdir(tmp, 0755) && errno != EEXIST) return -1;
      *p = '/';
    }
  return (mkdir(tmp, 0755) && errno != EEXIST) ? -1 : 0;
}

/* The host CPU's instruction-set extensions (Linux: the first "flags" line of
 * /proc/cpuinfo), for the XLA CPU plugin's keys: its executables are machine
 * code for the host that compiled them (AVX-512, AMX, ...), and a cache
 * directory shared by hosts of several CPU models, or an archive imported from
 * one (tpuc cache import), must not hand one host another's code. NULL where
 * unreadable: then the key holds only what it held before. */
static char *host_isa(void) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return NULL;
  char *line = NULL, *isa = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0)
    if (!strncmp(line, "flags", 5)) {
      const char *colon = strchr(line, ':');
      if (colon) isa = strdup(colon + 1);
      break;
    }
  free(line);
  fclose(f);
  return isa;
}

void tpuc_disk_cache_init(tpuc_runtime *rt, const char *dir, int64_t max_bytes) {
  rt->disk_dir = NULL;
  rt->disk_host_isa = NULL;
  rt->disk_last_use.tv_sec = 0; /* the first use starts a burst */
  if (tpuc_plugin_kind_of(rt->plugin.path) == TPUC_PLUGIN_CPU) rt->disk_host_isa = host_isa();
  const char *d = dir ? dir : getenv("TPUC_CACHE_DIR");
  char buf[4096];
  if (!d || !*d) {
    const char *home = getenv("HOME");
    if (!home || !*home) return;
    snprintf(buf, sizeof buf, "%s/.cache/tpuc", home);
    d = buf;
  }
  if (!strcmp(d, "off") || !strcmp(d, "0")) return;
  if (mkdirs(d)) { /* unusable directory: the disk tier stays off */
    fprintf(stderr, "tpuc: warning: the compile cache directory %s cannot be created (%s); "
                    "compiled programs are not kept on disk (set TPUC_CACHE_DIR)\n",
            d, strerror(errno));
    return;
  }
  rt->disk_dir = strdup(d);
  const char *mb = getenv("TPUC_CACHE_MAX_BYTES");
  rt->disk_max_bytes = max_bytes > 0 ? max_bytes : (mb && *mb ? atoll(mb) : DEFAULT_MAX_BYTES);
}

void tpuc_disk_key(const tpuc_runtime *rt, const char *text, size_t len, const void *opts,
                   size_t opts_len, unsigned char key[32]) {
  tpuc_sha256 s;
  tpuc_sha256_init(&s);
  uint64_t n = len;
  tpuc_sha256_update(&s, &n, sizeof n);
  tpuc_sha256_update(&s, text, len);
  n = opts_len;
  tpuc_sha256_update(&s, &n, sizeof n);
  tpuc_sha256_update(&s, opts, opts_len);
  tpuc_sha256_update(&s, rt->platform_name, strlen(rt->platform_name) + 1);
  tpuc_sha256_update(&s, rt->platform_version, strlen(rt->platform_version) + 1);
  int v[2] = {rt->plugin.api_major, rt->plugin.api_minor};
  tpuc_sha256_update(&s, v, sizeof v);
  /* the plugin's XLA build and the device kind: an executable for one GPU
   * model (or TPU generation) is not one for another, and a shared cache
   * directory may serve hosts of several kinds */
  int64_t xla = rt->xla_version;
  tpuc_sha256_update(&s, &xla, sizeof xla);
  const char *kind = rt->device_count > 0 && rt->devices[0].kind ? rt->devices[0].kind : "";
  tpuc_sha256_update(&s, kind, strlen(kind) + 1);
  if (rt->disk_host_isa) tpuc_sha256_update(&s, rt->disk_host_isa, strlen(rt->disk_host_isa) + 1);
  /* XLA's plugins read their debug options from XLA_FLAGS: programs compiled
   * under other flags are other programs */
  const char *flags = getenv("XLA_FLAGS");
  if (flags) tpuc_sha256_update(&s, flags, strlen(flags) + 1);
  tpuc_sha256_final(&s, key);
}

static void key_path(const tpuc_runtime *rt, const unsigned char key[32], char *out, size_t n) {
  char hex[65];
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", key[i]);
  snprintf(out, n, "%s/%s.tpx", rt->disk_dir, hex);
}

static void count(tpuc_runtime *rt, int64_t *field) {
  pthread_mutex_lock(&rt->cache_lock);
  (*field)++;
  pthread_mutex_unlock(&rt->cache_lock);
}

unsigned char *tpuc_read_whole_file(const char *path, size_t *len) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return NULL;
  struct stat st;
  unsigned char *buf = NULL;
  if (!fstat(fd, &st) && st.st_size >= 0) {
    buf = malloc((size_t)st.st_size ? (size_t)st.st_size : 1);
    size_t got = 0;
    while (buf && got < (size_t)st.st_size) {
      ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
      if (r <= 0) break;
      got += (size_t)r;
    }
    if (buf && got != (size_t)st.st_size) {
      free(buf);
      buf = NULL;
    }
    *len = got;
  }
  close(fd);
  return buf;
}

bool tpuc_disk_parse(const unsigned char *buf, size_t len, tpuc_disk_entry *e) {
  memset(e, 0, sizeof *e);
  if (len < HEADER_SIZE) return false;
  if (!memcmp(buf, MAGIC1, 8)) e->version = 1;
  else if (!memcmp(buf, MAGIC2, 8)) e->version = 2;
  else return false;
  uint64_t blen, sum;
  memcpy(e->key, buf + 8, 32);
  memcpy(&blen, buf + 40, 8);
  memcpy(&sum, buf + 48, 8);
  if (blen != len - HEADER_SIZE || tpuc_hash64(buf + HEADER_SIZE, blen, 0) != sum) return false;
  const unsigned char *body = buf + HEADER_SIZE;
  if (e->version == 1) {
    e->payload = body;
    e->payload_len = blen;
    return true;
  }
  uint64_t tl, ol;
  if (blen < 16) return false;
  memcpy(&tl, body, 8);
  memcpy(&ol, body + 8, 8);
  if (tl > blen - 16 || ol > blen - 16 - tl) return false;
  e->text = (const char *)body + 16;
  e->text_len = tl;
  e->opts = body + 16 + tl;
  e->opts_len = ol;
  e->payload = body + 16 + tl + ol;
  e->payload_len = blen - 16 - tl - ol;
  return true;
}

bool tpuc_disk_deserialize(tpuc_runtime *rt, const void *payload, size_t len,
                           pj_loaded_executable **out, double *seconds) {
  *out = NULL;
  *seconds = 0;
  pj_generic_fn fn = (pj_generic_fn)tpuc_plugin_fn(&rt->plugin,
                                                   PJ_SLOT_EXECUTABLE_DESERIALIZE_AND_LOAD);
  if (!fn) return false;
  pj_deserialize_and_load_args a = {0};
  a.struct_size = PJ_SIZE(pj_deserialize_and_load_args, load_options);
  a.client = rt->client;
  a.serialized_executable = (const char *)payload;
  a.serialized_executable_size = len;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  tpuc_status *s = tpuc_plugin_error(&rt->plugin, fn(&a), "loading a cached executable");
  clock_gettime(CLOCK_MONOTONIC, &t1);
  *seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  if (s) { /* the plugin refused it (another plugin build): the caller treats it as corrupt */
    tpuc_status_destroy(s);
    return false;
  }
  *out = a.loaded_executable;
  return true;
}

void tpuc_disk_remove_bad(tpuc_runtime *rt, const char *path) {
  unlink(path);
  pthread_mutex_lock(&rt->cache_lock);
  rt->disk_corrupt++;
  pthread_mutex_unlock(&rt->cache_lock);
}

void tpuc_disk_touch(tpuc_runtime *rt, const unsigned char key[32]) {
  if (!rt->disk_dir) return;
  char path[4200];
  key_path(rt, key, path, sizeof path);
  /* Dated at the start of the burst of uses it belongs to (uses less than a
   * second apart, e.g. a first step's), less a microsecond per use before it
   * in the burst: among a burst's entries the first used is the newest, so
   * newest-first is the order they were needed in (preload.c); between
   * bursts the later one is newer (least-recently-used eviction). */
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  pthread_mutex_lock(&rt->cache_lock);
  double gap = (double)(now.tv_sec - rt->disk_last_use.tv_sec) +
               1e-9 * (double)(now.tv_nsec - rt->disk_last_use.tv_nsec);
  if (gap > 1.0 || gap < 0) {
    rt->disk_epoch = now;
    rt->disk_uses = 0;
  }
  rt->disk_last_use = now;
  long long k = rt->disk_uses++;
  struct timespec t[2] = {{0, UTIME_OMIT}, rt->disk_epoch};
  pthread_mutex_unlock(&rt->cache_lock);
  t[1].tv_sec -= (time_t)(k / 1000000);
  t[1].tv_nsec -= (long)(k % 1000000) * 1000;
  if (t[1].tv_nsec < 0) {
    t[1].tv_nsec += 1000000000L;
    t[1].tv_sec--;
  }
  utimensat(AT_FDCWD, path, t, 0);
}

static bool write_entry(tpuc_runtime *rt, const unsigned char key[32],
                        const tpuc_disk_program *prog, const void *payload, size_t plen);

static tpuc_status *disk_load(tpuc_runtime *rt, const unsigned char key[32],
                              const tpuc_disk_program *prog, pj_loaded_executable **out,
                              bool count_miss);

tpuc_status *tpuc_disk_load(tpuc_runtime *rt, const unsigned char key[32],
                            const tpuc_disk_program *prog, pj_loaded_executable **out) {
  return disk_load(rt, key, prog, out, true);
}

tpuc_status *tpuc_disk_reload(tpuc_runtime *rt, const unsigned char key[32],
                              const tpuc_disk_program *prog, pj_loaded_executable **out) {
  return disk_load(rt, key, prog, out, false);
}

bool tpuc_disk_has(const tpuc_runtime *rt, const unsigned char key[32]) {
  if (!rt->disk_dir) return false;
  char path[4096];
  key_path(rt, key, path, sizeof path);
  return access(path, R_OK) == 0;
}

static void lock_path(const tpuc_runtime *rt, const unsigned char key[32], char *out, size_t n) {
  key_path(rt, key, out, n);
  size_t l = strlen(out);
  if (l > 4 && l + 2 < n) memcpy(out + l - 4, ".lock", 6); /* <key>.tpx -> <key>.lock */
}

int tpuc_disk_lock(tpuc_runtime *rt, const unsigned char key[32]) {
  if (!rt->disk_dir) return -1;
  char path[4200];
  lock_path(rt, key, path, sizeof path);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return -1; /* e.g. a read-only directory: compile without the lock */
  while (flock(fd, LOCK_EX) != 0) {
    if (errno != EINTR) {
      close(fd);
      return -1;
    }
  }
  return fd;
}

void tpuc_disk_unlock(tpuc_runtime *rt, const unsigned char key[32], int fd) {
  if (fd < 0) return;
  /* Removed while held: a process that opened it meanwhile gets the lock
   * next, one that comes later makes a new file; both look at the cache again
   * first, and the entry is already there. */
  char path[4200];
  lock_path(rt, key, path, sizeof path);
  unlink(path);
  flock(fd, LOCK_UN);
  close(fd);
}

static tpuc_status *disk_load(tpuc_runtime *rt, const unsigned char key[32],
                              const tpuc_disk_program *prog, pj_loaded_executable **out,
                              bool count_miss) {
  *out = NULL;
  if (!rt->disk_dir) return NULL;
  char path[4200];
  key_path(rt, key, path, sizeof path);
  size_t len = 0;
  unsigned char *buf = tpuc_read_whole_file(path, &len);
  if (!buf) {
    if (count_miss) count(rt, &rt->disk_misses);
    return NULL;
  }
  tpuc_disk_entry e;
  bool ok = tpuc_disk_parse(buf, len, &e) && !memcmp(e.key, key, 32);
  if (ok) {
    double secs = 0;
    ok = tpuc_disk_deserialize(rt, e.payload, e.payload_len, out, &secs);
    pthread_mutex_lock(&rt->cache_lock);
    rt->load_seconds += secs;
    pthread_mutex_unlock(&rt->cache_lock);
  }
  /* a format-1 file: rewritten with its program, so that the next process preloads it */
  if (ok && e.version == 1 && prog) write_entry(rt, key, prog, e.payload, e.payload_len);
  free(buf);
  if (!ok) {
    tpuc_disk_remove_bad(rt, path);
    count(rt, &rt->disk_misses);
    return NULL;
  }
  tpuc_disk_touch(rt, key); /* most recently used */
  count(rt, &rt->disk_hits);
  return NULL;
}

typedef struct {
  char name[300];
  time_t mtime;
  off_t size;
} entry;

static int by_mtime(const void *a, const void *b) {
  const entry *x = a, *y = b;
  return x->mtime < y->mtime ? -1 : x->mtime > y->mtime;
}

/* Removes least recently used files until the directory fits; also removes
 * temporary and lock files abandoned by crashed processes (older than an hour). */
static void evict(tpuc_runtime *rt) {
  DIR *d = opendir(rt->disk_dir);
  if (!d) return;
  entry *es = NULL;
  size_t n = 0, cap = 0;
  int64_t total = 0;
  time_t now = time(NULL);
  struct dirent *de;
  char path[4400];
  while ((de = readdir(d))) {
    size_t l = strlen(de->d_name);
    bool tmp = strstr(de->d_name, ".tmp.") != NULL ||
               (l > 5 && !strcmp(de->d_name + l - 5, ".lock"));
    if (!tmp && (l < 5 || strcmp(de->d_name + l - 4, ".tpx"))) continue;
    if (l >= sizeof es[0].name) continue;
    snprintf(path, sizeof path, "%s/%s", rt->disk_dir, de->d_name);
    struct stat st;
    if (stat(path, &st)) continue;
    if (tmp) {
      if (now - st.st_mtime > 3600) unlink(path);
      continue;
    }
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      entry *ne = realloc(es, cap * sizeof *ne);
      if (!ne) break;
      es = ne;
    }
    memcpy(es[n].name, de->d_name, l + 1);
    es[n].mtime = st.st_mtime;
    es[n].size = st.st_size;
    total += st.st_size;
    n++;
  }
  closedir(d);
  if (total > rt->disk_max_bytes) {
    qsort(es, n, sizeof *es, by_mtime);
    for (size_t i = 0; i < n && total > rt->disk_max_bytes; i++) {
      snprintf(path, sizeof path, "%s/%s", rt->disk_dir, es[i].name);
      if (!unlink(path)) {
        total -= es[i].size;
        count(rt, &rt->disk_evictions);
      }
    }
  }
  free(es);
}

/* Writes an entry of format 2 under a temporary name and renames it into
 * place; false (and a warning, once) when it cannot. */
static bool write_entry(tpuc_runtime *rt, const unsigned char key[32],
                        const tpuc_disk_program *prog, const void *payload, size_t plen) {
  char path[4200], tmp[4300];
  key_path(rt, key, path, sizeof path);
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld.%lx", path, (long)getpid(),
           (unsigned long)(uintptr_t)&path ^ (unsigned long)time(NULL));
  uint64_t lens[2] = {prog->len, prog->opts_len};
  uint64_t blen = 16 + prog->len + prog->opts_len + plen;
  unsigned char *body = malloc(blen); /* in one piece: its checksum is one hash */
  if (!body) return false;
  memcpy(body, lens, 16);
  memcpy(body + 16, prog->text, prog->len);
  if (prog->opts_len) memcpy(body + 16 + prog->len, prog->opts, prog->opts_len);
  memcpy(body + 16 + prog->len + prog->opts_len, payload, plen);
  uint64_t sum = tpuc_hash64(body, blen, 0);
  unsigned char header[HEADER_SIZE];
  memcpy(header, MAGIC2, 8);
  memcpy(header + 8, key, 32);
  memcpy(header + 40, &blen, 8);
  memcpy(header + 48, &sum, 8);
  errno = 0;
  FILE *f = fopen(tmp, "wb");
  bool ok = f && fwrite(header, 1, HEADER_SIZE, f) == HEADER_SIZE &&
            fwrite(body, 1, blen, f) == blen;
  if (f) ok = (fclose(f) == 0) && ok;
  free(body);
  if (ok && !rename(tmp, path)) return true;
  int err = errno;
  unlink(tmp);
  /* a full or read-only disk costs only compile time later: say so once */
  if (!atomic_exchange(&rt->disk_warned, true))
    fprintf(stderr, "tpuc: warning: cannot write to the compile cache in %s (%s); running "
                    "on, but new processes will compile these programs again. Free space, "
                    "fix permissions or set TPUC_CACHE_DIR (\"off\" disables it)\n",
            rt->disk_dir, err ? strerror(err) : "write failed");
  return false;
}

void tpuc_disk_store(tpuc_runtime *rt, const unsigned char key[32], const tpuc_disk_program *prog,
                     pj_loaded_executable *exe) {
  if (!rt->disk_dir) return;
  const tpuc_plugin *p = &rt->plugin;
  pj_generic_fn get_exe = (pj_generic_fn)tpuc_plugin_fn(p, PJ_SLOT_LOADED_EXECUTABLE_GET_EXECUTABLE);
  pj_generic_fn ser = (pj_generic_fn)tpuc_plugin_fn(p, PJ_SLOT_EXECUTABLE_SERIALIZE);
  pj_generic_fn destroy = (pj_generic_fn)tpuc_plugin_fn(p, PJ_SLOT_EXECUTABLE_DESTROY);
  if (!get_exe || !ser || !destroy) return;
  pj_loaded_executable_get_executable_args g = {0};
  g.struct_size = PJ_SIZE(pj_loaded_executable_get_executable_args, executable);
  g.loaded_executable = exe;
  tpuc_status *s = tpuc_plugin_error(p, get_exe(&g), NULL);
  if (s) {
    tpuc_status_destroy(s);
    return;
  }
  pj_executable_serialize_args a = {0};
  a.struct_size = PJ_SIZE(pj_executable_serialize_args, serialized_executable_deleter);
  a.executable = g.executable;
  s = tpuc_plugin_error(p, ser(&a), NULL);
  if (!s && a.serialized_bytes && write_entry(rt, key, prog, a.serialized_bytes,
                                              a.serialized_bytes_size)) {
    tpuc_disk_touch(rt, key);
    count(rt, &rt->disk_writes);
  }
  tpuc_status_destroy(s);
  if (a.serialized_executable_deleter) a.serialized_executable_deleter(a.serialized_executable);
  pj_executable_destroy_args da = {0};
  da.struct_size = PJ_SIZE(pj_executable_destroy_args, executable);
  da.executable = g.executable;
  tpuc_status_destroy(tpuc_plugin_error(p, destroy(&da), NULL));
  if (rt->disk_max_bytes > 0) evict(rt);
}
