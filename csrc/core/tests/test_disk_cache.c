/* test_disk_cache.c — the disk tier of the executable cache: a second
 * runtime loads what the first compiled; truncated, corrupt and foreign files
 * are detected, removed and recompiled; concurrent writers in other
 * processes leave only whole files; processes compiling the same programs at
 * once compile each one once (the lock); the directory stays under its bound;
 * the preload (preload.c) loads a warm directory into memory ahead of use,
 * most recently used first within its cap, skipping format-1 and removing bad
 * files, and the first use of a preloaded program marks its file used. */
#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../runtime/internal.h"
#include "harness.h"

harness g_h;
extern char **environ;
static char g_dir[256];
static const char *g_self;


/* preload: < 0 off (the on-demand tests count every disk hit), N > 0 at most N programs */
static tpuc_runtime *open_rt_preload(const char *dir, int64_t max_bytes, int preload) {
  tpuc_runtime_options o = {NULL, 0, dir, max_bytes, preload};
  tpuc_runtime *rt = NULL;
  CHECK_OK(tpuc_runtime_create(&o, &rt));
  return rt;
}

static tpuc_runtime *open_rt(const char *dir, int64_t max_bytes) {
  return open_rt_preload(dir, max_bytes, -1);
}

/* Compiles program k, runs it on [1,2,3,4] and checks the result. */
static void compile_and_check(tpuc_runtime *rt, int k) {
  char text[1024];
  harness_program(text, sizeof text, k);
  tpuc_executable *e = NULL;
  CHECK_OK(tpuc_compile(rt, text, strlen(text), &e));
  if (!e) return;
  float in[4] = {1, 2, 3, 4}, out[4];
  int64_t four = 4;
  tpuc_buffer *a = NULL, *r = NULL;
  CHECK_OK(tpuc_buffer_from_host(rt, 0, TPUC_F32, &four, 1, in, &a));
  if (a) CHECK_OK(tpuc_execute(e, 0, &a, 1, &r, false));
  if (r) {
    CHECK_OK(tpuc_buffer_to_host(r, out, sizeof out));
    for (int i = 0; i < 4; i++) CHECK(out[i] == in[i] + (float)k);
  }
  tpuc_buffer_release(r);
  tpuc_buffer_release(a);
  tpuc_executable_release(e);
}

static int count_files(int64_t *bytes) {
  DIR *d = opendir(g_dir);
  int n = 0;
  *bytes = 0;
  struct dirent *de;
  while (d && (de = readdir(d))) {
    size_t l = strlen(de->d_name);
    if (l > 4 && !strcmp(de->d_name + l - 4, ".tpx")) {
      char p[512];
      snprintf(p, sizeof p, "%s/%s", g_dir, de->d_name);
      struct stat st;
      if (!stat(p, &st)) *bytes += st.st_size;
      n++;
    }
  }
  if (d) closedir(d);
  return n;
}

static void clear_dir(void) {
  DIR *d = opendir(g_dir);
  struct dirent *de;
  while (d && (de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, de->d_name);
    unlink(p);
  }
  if (d) closedir(d);
}

static void first_file(char *out, size_t n) {
  DIR *d = opendir(g_dir);
  struct dirent *de;
  out[0] = 0;
  while (d && (de = readdir(d)))
    if (strstr(de->d_name, ".tpx")) {
      snprintf(out, n, "%s/%s", g_dir, de->d_name);
      break;
    }
  if (d) closedir(d);
}

static void test_second_process_loads_instead_of_compiling(void) {
  clear_dir();
  tpuc_runtime *a = open_rt(g_dir, 0);
  if (!a) return;
  compile_and_check(a, 1);
  tpuc_runtime_stats s;
  tpuc_runtime_stats_get(a, &s);
  CHECK(s.compiles == 1 && s.disk_misses == 1 && s.disk_writes == 1);
  tpuc_runtime_destroy(a);
  tpuc_runtime *b = open_rt(g_dir, 0);
  if (!b) return;
  compile_and_check(b, 1);
  tpuc_runtime_stats_get(b, &s);
  CHECK(s.compiles == 0 && s.disk_hits == 1 && s.cache_misses == 1);
  compile_and_check(b, 1); /* now from memory */
  tpuc_runtime_stats_get(b, &s);
  CHECK(s.cache_hits == 1 && s.disk_hits == 1);
  tpuc_runtime_destroy(b);
}

static void corrupt_then_check(void (*damage)(const char *path)) {
  clear_dir();
  tpuc_runtime *a = open_rt(g_dir, 0);
  if (!a) return;
  compile_and_check(a, 2);
  tpuc_runtime_destroy(a);
  char path[512];
  first_file(path, sizeof path);
  CHECK(path[0]);
  damage(path);
  tpuc_runtime *b = open_rt(g_dir, 0);
  if (!b) return;
  compile_and_check(b, 2);
  tpuc_runtime_stats s;
  tpuc_runtime_stats_get(b, &s);
  CHECK(s.disk_corrupt == 1 && s.compiles == 1 && s.disk_writes == 1);
  tpuc_runtime_destroy(b);
  /* the rewritten file is whole again */
  tpuc_runtime *c = open_rt(g_dir, 0);
  if (!c) return;
  compile_and_check(c, 2);
  tpuc_runtime_stats_get(c, &s);
  CHECK(s.disk_hits == 1 && s.disk_corrupt == 0 && s.compiles == 0);
  tpuc_runtime_destroy(c);
}

static void truncate_half(const char *path) {
  struct stat st;
  if (!stat(path, &st)) CHECK(truncate(path, st.st_size / 2) == 0);
}
static void flip_payload_byte(const char *path) {
  int fd = open(path, O_RDWR);
  unsigned char b;
  if (fd < 0) return;
  CHECK(pread(fd, &b, 1, 100) == 1);
  b ^= 0xff;
  CHECK(pwrite(fd, &b, 1, 100) == 1);
  close(fd);
}
static void replace_with_garbage(const char *path) {
  FILE *f = fopen(path, "wb");
  if (f) {
    fputs("not an executable", f);
    fclose(f);
  }
}

static void test_truncated_entry(void) { corrupt_then_check(truncate_half); }
static void test_corrupt_entry(void) { corrupt_then_check(flip_payload_byte); }
static void test_garbage_entry(void) { corrupt_then_check(replace_with_garbage); }

static void test_concurrent_writers(void) {
  clear_dir();
  pid_t pids[3];
  char *argv[] = {(char *)g_self, "--writer", g_dir, NULL};
  for (int i = 0; i < 3; i++) CHECK(posix_spawn(&pids[i], g_self, NULL, NULL, argv, environ) == 0);
  for (int i = 0; i < 3; i++) {
    int st = 0;
    waitpid(pids[i], &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  int64_t bytes;
  CHECK(count_files(&bytes) == 6);
  tpuc_runtime *r = open_rt(g_dir, 0);
  if (!r) return;
  for (int k = 10; k < 16; k++) compile_and_check(r, k);
  tpuc_runtime_stats s;
  tpuc_runtime_stats_get(r, &s);
  CHECK(s.disk_hits == 6 && s.disk_corrupt == 0 && s.compiles == 0);
  tpuc_runtime_destroy(r);
}

/* Processes that start on the same programs together (the ranks of one job):
 * each program is compiled by one of them, the others wait for its file. The
 * children's exit status is how many programs each compiled (200: a failure). */
static void test_concurrent_compilers_compile_each_program_once(void) {
  clear_dir();
  enum { N = 4 };
  pid_t pids[N];
  char *argv[] = {(char *)g_self, "--compiler", g_dir, NULL};
  for (int i = 0; i < N; i++) CHECK(posix_spawn(&pids[i], g_self, NULL, NULL, argv, environ) == 0);
  int total = 0;
  for (int i = 0; i < N; i++) {
    int st = 0;
    waitpid(pids[i], &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) <= 6);
    if (WIFEXITED(st)) total += WEXITSTATUS(st);
  }
  CHECK(total == 6); /* 6 programs, compiled once each over the 4 processes */
  int64_t bytes;
  CHECK(count_files(&bytes) == 6);
  int locks = 0; /* none left behind */
  DIR *d = opendir(g_dir);
  for (struct dirent *de; d && (de = readdir(d));) {
    size_t l = strlen(de->d_name);
    locks += l > 5 && !strcmp(de->d_name + l - 5, ".lock");
  }
  if (d) closedir(d);
  CHECK(locks == 0);
}

static void test_eviction_bounds_the_directory(void) {
  clear_dir();
  tpuc_runtime *a = open_rt(g_dir, 0);
  if (!a) return;
  compile_and_check(a, 20);
  tpuc_runtime_destroy(a);
  int64_t one = 0;
  CHECK(count_files(&one) == 1);
  /* room for two files: after four compiles, the two newest remain */
  tpuc_runtime *b = open_rt(g_dir, one * 2 + one / 2);
  if (!b) return;
  for (int k = 21; k < 24; k++) {
    sleep(1); /* distinct mtimes */
    compile_and_check(b, k);
  }
  tpuc_runtime_stats s;
  tpuc_runtime_stats_get(b, &s);
  int64_t bytes = 0;
  int n = count_files(&bytes);
  CHECK(n == 2 && bytes <= one * 2 + one / 2);
  CHECK(s.disk_evictions == 2);
  tpuc_runtime_destroy(b);
  /* the newest survive: 22 and 23 load, 20 compiles */
  tpuc_runtime *c = open_rt(g_dir, 0);
  if (!c) return;
  compile_and_check(c, 23);
  compile_and_check(c, 22);
  compile_and_check(c, 20);
  tpuc_runtime_stats_get(c, &s);
  CHECK(s.disk_hits == 2 && s.compiles == 1);
  tpuc_runtime_destroy(c);
}

/* On the XLA CPU plugin the key holds the host's CPU flags: the same program
 * compiled on a host with other instruction-set extensions has another key, so
 * a shared or imported cache never hands one CPU another's machine code. */
static void test_host_cpu_flags_in_the_key(void) {
  tpuc_runtime *r = open_rt(g_dir, 0);
  if (!r) return;
  char text[1024];
  harness_program(text, sizeof text, 40);
  unsigned char here[32], other[32], again[32];
  tpuc_disk_key(r, text, strlen(text), "", 0, here);
  if (tpuc_plugin_kind_of(r->plugin.path) == TPUC_PLUGIN_CPU) {
    CHECK(r->disk_host_isa != NULL); /* Linux: /proc/cpuinfo has a flags line */
    if (r->disk_host_isa) {
      char *mine = r->disk_host_isa;
      char another[] = " fpu sse sse2";
      r->disk_host_isa = another;
      tpuc_disk_key(r, text, strlen(text), "", 0, other);
      r->disk_host_isa = mine;
      CHECK(memcmp(here, other, sizeof here) != 0);
    }
  }
  tpuc_disk_key(r, text, strlen(text), "", 0, again);
  CHECK(memcmp(here, again, sizeof here) == 0); /* and it is stable */
  tpuc_runtime_destroy(r);
}

static void test_off_disables(void) {
  tpuc_runtime *r = open_rt("off", 0);
  if (!r) return;
  compile_and_check(r, 30);
  tpuc_runtime_stats s;
  tpuc_runtime_stats_get(r, &s);
  CHECK(s.disk_writes == 0 && s.disk_misses == 0 && s.compiles == 1);
  tpuc_runtime_destroy(r);
}

/* Every entry whose mtime is the present gets `when` (seconds since 1970):
 * after one compile, that is the file it wrote. */
static void date_new_files(time_t when) {
  DIR *d = opendir(g_dir);
  time_t now = time(NULL);
  for (struct dirent *de; d && (de = readdir(d));) {
    if (!strstr(de->d_name, ".tpx")) continue;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, de->d_name);
    struct stat st;
    if (stat(p, &st) || now - st.st_mtime > 3600) continue;
    struct timespec ts[2] = {{when, 0}, {when, 0}};
    CHECK(utimensat(AT_FDCWD, p, ts, 0) == 0);
  }
  if (d) closedir(d);
}

static int fresh_files(void) { /* entries used within the last hour */
  DIR *d = opendir(g_dir);
  int n = 0;
  time_t now = time(NULL);
  for (struct dirent *de; d && (de = readdir(d));) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, de->d_name);
    struct stat st;
    n += strstr(de->d_name, ".tpx") && !stat(p, &st) && now - st.st_mtime < 3600;
  }
  if (d) closedir(d);
  return n;
}

/* A warm directory is in memory before it is asked for: no disk load on the
 * ops' path, no compile, the same results; the first use dates the file. */
static void test_preload_loads_ahead(void) {
  clear_dir();
  tpuc_runtime *a = open_rt(g_dir, 0);
  if (!a) return;
  for (int k = 50; k < 54; k++) compile_and_check(a, k);
  tpuc_runtime_destroy(a);
  date_new_files(1000);
  tpuc_runtime *b = open_rt_preload(g_dir, 0, 0);
  if (!b) return;
  tpuc_preload_wait(b);
  tpuc_runtime_stats s;
  tpuc_runtime_stats_get(b, &s);
  CHECK(s.preloaded == 4 && s.cached_executables == 4 && s.disk_hits == 0);
  CHECK(fresh_files() == 0); /* loading ahead is not a use */
  for (int k = 50; k < 53; k++) compile_and_check(b, k);
  tpuc_runtime_stats_get(b, &s);
  CHECK(s.compiles == 0 && s.disk_hits == 0 && s.cache_hits == 3 && s.load_seconds == 0);
  CHECK(fresh_files() == 3); /* the three used now, not the fourth */
  tpuc_runtime_destroy(b);
}

/* The mtime of program k's entry (found by its text, which format 2 holds); 0: none. */
static double program_mtime(int k) {
  char want[32];
  snprintf(want, sizeof want, "module @p%d {", k);
  DIR *d = opendir(g_dir);
  double t = 0;
  for (struct dirent *de; d && (de = readdir(d));) {
    if (!strstr(de->d_name, ".tpx")) continue;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_dir, de->d_name);
    size_t len = 0;
    unsigned char *buf = tpuc_read_whole_file(p, &len);
    tpuc_disk_entry e;
    struct stat st;
    if (buf && tpuc_disk_parse(buf, len, &e) && e.text && e.text_len > strlen(want) &&
        !memcmp(e.text, want, strlen(want)) && !stat(p, &st))
      t = (double)st.st_mtim.tv_sec + 1e-9 * (double)st.st_mtim.tv_nsec;
    free(buf);
  }
  if (d) closedir(d);
  return t;
}

/* Newest first, at most N loaded and unused at a time: the thread pauses
 * with a full window and goes on as the process uses what it loaded. */
static void test_preload_window_newest_first(void) {
  clear_dir();
  tpuc_runtime *a = open_rt(g_dir, 0);
  if (!a) return;
  for (int k = 60; k < 64; k++) {
    compile_and_check(a, k);
    date_new_files(1000 * (k - 59)); /* 63 is the newest */
  }
  tpuc_runtime_destroy(a);
  tpuc_runtime *b = open_rt_preload(g_dir, 0, 2);
  if (!b) return;
  tpuc_preload_wait(b); /* paused: 63 and 62 loaded, unused */
  tpuc_runtime_stats s;
  tpuc_runtime_stats_get(b, &s);
  CHECK(s.preloaded == 2);
  compile_and_check(b, 63);
  compile_and_check(b, 62);
  tpuc_runtime_stats_get(b, &s);
  CHECK(s.disk_hits == 0 && s.cache_hits == 2);
  tpuc_preload_wait(b); /* room again: 61 and 60 */
  compile_and_check(b, 60);
  compile_and_check(b, 61);
  tpuc_runtime_stats_get(b, &s);
  CHECK(s.preloaded == 4 && s.disk_hits == 0 && s.compiles == 0 && s.cache_hits == 4);
  tpuc_runtime_destroy(b);
  /* the using process dated them: the first it used is the newest */
  double t63 = program_mtime(63), t62 = program_mtime(62), t60 = program_mtime(60),
         t61 = program_mtime(61);
  CHECK(t63 > t62 && t62 > t60 && t60 > t61 && t61 > 1e9);
}

/* A damaged file is removed by the preload (not loaded, not fatal); the
 * program compiles again when asked. */
static void test_preload_removes_bad_files(void) {
  clear_dir();
  tpuc_runtime *a = open_rt(g_dir, 0);
  if (!a) return;
  compile_and_check(a, 70);
  tpuc_runtime_destroy(a);
  char path[512];
  first_file(path, sizeof path);
  truncate_half(path);
  a = open_rt(g_dir, 0);
  if (!a) return;
  compile_and_check(a, 71); /* the good one beside it */
  tpuc_runtime_destroy(a);
  tpuc_runtime *b = open_rt_preload(g_dir, 0, 0);
  if (!b) return;
  tpuc_preload_wait(b);
  tpuc_runtime_stats s;
  tpuc_runtime_stats_get(b, &s);
  CHECK(s.preloaded == 1 && s.disk_corrupt == 1 && access(path, F_OK) != 0);
  compile_and_check(b, 70);
  compile_and_check(b, 71);
  tpuc_runtime_stats_get(b, &s);
  CHECK(s.compiles == 1 && s.cache_hits == 1);
  tpuc_runtime_destroy(b);
}

/* A format-1 file (tpuc before the preload: the executable alone) is not
 * preloaded, loads on demand and is rewritten as format 2 then. */
static void test_preload_format1_upgraded_on_use(void) {
  clear_dir();
  tpuc_runtime *a = open_rt(g_dir, 0);
  if (!a) return;
  compile_and_check(a, 80);
  tpuc_runtime_destroy(a);
  char path[512];
  first_file(path, sizeof path);
  size_t len = 0;
  unsigned char *buf = tpuc_read_whole_file(path, &len);
  tpuc_disk_entry e;
  CHECK(buf && tpuc_disk_parse(buf, len, &e) && e.version == 2 && e.text_len > 0);
  if (!buf || e.version != 2) return;
  /* the same executable in format 1 */
  uint64_t plen = e.payload_len, sum = tpuc_hash64(e.payload, e.payload_len, 0);
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (f) {
    fwrite("TPUCEXE1", 1, 8, f);
    fwrite(e.key, 1, 32, f);
    fwrite(&plen, 1, 8, f);
    fwrite(&sum, 1, 8, f);
    fwrite(e.payload, 1, plen, f);
    fclose(f);
  }
  free(buf);
  tpuc_runtime *b = open_rt_preload(g_dir, 0, 0);
  if (!b) return;
  tpuc_preload_wait(b);
  compile_and_check(b, 80);
  tpuc_runtime_stats s;
  tpuc_runtime_stats_get(b, &s);
  CHECK(s.preloaded == 0 && s.disk_hits == 1 && s.compiles == 0 && s.disk_corrupt == 0);
  tpuc_runtime_destroy(b);
  buf = tpuc_read_whole_file(path, &len);
  CHECK(buf && tpuc_disk_parse(buf, len, &e) && e.version == 2);
  free(buf);
  tpuc_runtime *c = open_rt_preload(g_dir, 0, 0);
  if (!c) return;
  tpuc_preload_wait(c);
  compile_and_check(c, 80);
  tpuc_runtime_stats_get(c, &s);
  CHECK(s.preloaded == 1 && s.disk_hits == 0 && s.compiles == 0);
  tpuc_runtime_destroy(c);
}

/* Destroyed while it preloads: the thread ends first (no crash, no leak). */
static void test_preload_stops_at_destroy(void) {
  clear_dir();
  tpuc_runtime *a = open_rt(g_dir, 0);
  if (!a) return;
  for (int k = 90; k < 98; k++) compile_and_check(a, k);
  tpuc_runtime_destroy(a);
  for (int i = 0; i < 3; i++) {
    tpuc_runtime *b = open_rt_preload(g_dir, 0, 0);
    if (!b) return;
    tpuc_stop_background_compiles(b);
    tpuc_runtime_stats s;
    tpuc_runtime_stats_get(b, &s);
    CHECK(s.preloaded <= 8);
    compile_and_check(b, 97); /* still usable: from memory or disk */
    tpuc_runtime_destroy(b);
  }
}

/* Several loaders (TPUC_CACHE_PRELOAD_THREADS) share one window and one
 * list: four loaders with a window of 3 load exactly the 3 newest, never a
 * fourth before one is used, and every program is loaded once in all (by a
 * loader or by the op that asked first), with one loader as with four. */
static void test_preload_loaders_share_the_window(void) {
  clear_dir();
  tpuc_runtime *a = open_rt(g_dir, 0);
  if (!a) return;
  for (int k = 100; k < 110; k++) {
    compile_and_check(a, k);
    date_new_files(1000 * (k - 99)); /* 109 is the newest */
  }
  tpuc_runtime_destroy(a);
  const char *counts[] = {"1", "4"};
  for (int c = 0; c < 2; c++) {
    setenv("TPUC_CACHE_PRELOAD_THREADS", counts[c], 1);
    tpuc_runtime *b = open_rt_preload(g_dir, 0, 3);
    if (!b) break;
    tpuc_preload_wait(b);
    tpuc_runtime_stats s;
    tpuc_runtime_stats_get(b, &s);
    CHECK(s.preloaded == 3 && s.cached_executables == 3);
    for (int k = 109; k >= 107; k--) compile_and_check(b, k); /* the three it holds */
    tpuc_runtime_stats_get(b, &s);
    CHECK(s.cache_hits == 3 && s.disk_hits == 0);
    for (int k = 106; k >= 100; k--) compile_and_check(b, k);
    tpuc_runtime_stats_get(b, &s);
    CHECK(s.compiles == 0 && s.preloaded + s.disk_hits == 10);
    tpuc_runtime_destroy(b);
  }
  unsetenv("TPUC_CACHE_PRELOAD_THREADS");
}

int main(int argc, char **argv) {
  if (!harness_plugin_set()) return 1;
  if (argc == 3 && !strcmp(argv[1], "--writer")) { /* a concurrent writer process */
    snprintf(g_dir, sizeof g_dir, "%s", argv[2]);
    tpuc_runtime *r = open_rt(g_dir, 0);
    for (int k = 10; r && k < 16; k++) compile_and_check(r, k);
    tpuc_runtime_destroy(r);
    return g_h.current_failed;
  }
  if (argc == 3 && !strcmp(argv[1], "--compiler")) { /* exit status: programs it compiled */
    snprintf(g_dir, sizeof g_dir, "%s", argv[2]);
    tpuc_runtime *r = open_rt(g_dir, 0);
    for (int k = 20; r && k < 26; k++) compile_and_check(r, k);
    tpuc_runtime_stats s = {0};
    if (r) tpuc_runtime_stats_get(r, &s);
    tpuc_runtime_destroy(r);
    return (g_h.current_failed || !r) ? 200 : (int)s.compiles;
  }
  g_self = argv[0];
  snprintf(g_dir, sizeof g_dir, "/tmp/tpuc-disk-test-XXXXXX");
  if (!mkdtemp(g_dir)) {
    printf("mkdtemp failed\n0 passed, 1 failed\n");
    return 1;
  }
  RUN(test_second_process_loads_instead_of_compiling);
  RUN(test_truncated_entry);
  RUN(test_corrupt_entry);
  RUN(test_garbage_entry);
  RUN(test_concurrent_writers);
  RUN(test_concurrent_compilers_compile_each_program_once);
  RUN(test_eviction_bounds_the_directory);
  RUN(test_host_cpu_flags_in_the_key);
  RUN(test_off_disables);
  RUN(test_preload_loads_ahead);
  RUN(test_preload_window_newest_first);
  RUN(test_preload_removes_bad_files);
  RUN(test_preload_format1_upgraded_on_use);
  RUN(test_preload_stops_at_destroy);
  RUN(test_preload_loaders_share_the_window);
  clear_dir();
  rmdir(g_dir);
  return harness_end();
}
