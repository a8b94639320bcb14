/* test_disk_cache.c — the disk tier of the executable cache: a second
 * runtime loads what the first compiled; truncated, corrupt and foreign files
 * are detected, removed and recompiled; concurrent writers in other
 * processes leave only whole files; processes compiling the same programs at
 * once compile each one once (the lock); the directory stays under its bound. */
#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../runtime/internal.h"
#include "harness.h"

harness g_h;
extern char **environ;
static char g_dir[256];
static const char *g_self;

static void program(char *buf, size_t n, int k) {
  snprintf(buf, n,
           "module @p%d {\n  func.func public @main(%%a: tensor<4xf32>) -> tensor<4xf32> {\n"
           "    %%c = \"stablehlo.constant\"() {value = dense<%d.0> : tensor<4xf32>} : () -> "
           "tensor<4xf32>\n"
           "    %%0 = \"stablehlo.add\"(%%a, %%c) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
           "    \"func.return\"(%%0) : (tensor<4xf32>) -> ()\n  }\n}\n",
           k, k);
}

static tpuc_runtime *open_rt(const char *dir, int64_t max_bytes) {
  tpuc_runtime_options o = {NULL, 0, dir, max_bytes};
  tpuc_runtime *rt = NULL;
  CHECK_OK(tpuc_runtime_create(&o, &rt));
  return rt;
}

/* Compiles program k, runs it on [1,2,3,4] and checks the result. */
static void compile_and_check(tpuc_runtime *rt, int k) {
  char text[1024];
  program(text, sizeof text, k);
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
  program(text, sizeof text, 40);
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

int main(int argc, char **argv) {
  if (!getenv("TPUC_PJRT_PLUGIN")) {
    printf("TPUC_PJRT_PLUGIN is not set\n0 passed, 1 failed\n");
    return 1;
  }
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
  clear_dir();
  rmdir(g_dir);
  printf("%d passed, %d failed\n", g_h.passed, g_h.failed);
  return g_h.failed ? 1 : 0;
}
