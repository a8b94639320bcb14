/* test_progress.c — the compile progress lines (runtime/progress.c): with
 * TPUC_COMPILE_PROGRESS=0 a burst of compiles prints a progress line and,
 * once no compile has run for two seconds, one closing line with the count;
 * a runtime destroyed inside a burst that printed still closes its line;
 * "off", a burst shorter than the default threshold, and a rank other than 0
 * print nothing. stderr goes to a file for each case. */
#include <fcntl.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "tpuc.h"

harness g_h;
static char g_log[64];

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}
static int g_saved = -1;


/* stderr -> a fresh file, until restore() */
static void capture(void) {
  snprintf(g_log, sizeof g_log, "/tmp/tpuc-progress-XXXXXX");
  int fd = mkstemp(g_log);
  fflush(stderr);
  g_saved = dup(2);
  dup2(fd, 2);
  close(fd);
}

static void restore(void) {
  fflush(stderr);
  dup2(g_saved, 2);
  close(g_saved);
}

static char *logged(void) {
  static char buf[8192];
  FILE *f = fopen(g_log, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  buf[n] = 0;
  if (f) fclose(f);
  return buf;
}

static tpuc_runtime *open_rt(const char *setting, const char *rank) {
  if (setting) setenv("TPUC_COMPILE_PROGRESS", setting, 1);
  else unsetenv("TPUC_COMPILE_PROGRESS");
  if (rank) setenv("RANK", rank, 1);
  else unsetenv("RANK");
  tpuc_runtime_options o = {NULL, 0, "off", 0, -1};
  tpuc_runtime *rt = NULL;
  CHECK_OK(tpuc_runtime_create(&o, &rt));
  return rt;
}

static void compile_some(tpuc_runtime *rt, int first, int n) {
  char text[1024];
  for (int k = first; k < first + n; k++) {
    harness_program(text, sizeof text, k);
    tpuc_executable *e = NULL;
    CHECK_OK(tpuc_compile(rt, text, strlen(text), &e));
    tpuc_executable_release(e);
  }
}

static void done(tpuc_runtime *rt) {
  tpuc_runtime_destroy(rt);
  restore();
  unlink(g_log);
  unsetenv("TPUC_COMPILE_PROGRESS");
  unsetenv("RANK");
}

static void test_burst_prints_progress_then_a_closing_line(void) {
  capture();
  tpuc_runtime *rt = open_rt("0", NULL);
  if (!rt) {
    restore();
    return;
  }
  compile_some(rt, 0, 3);
  /* the burst ends 2 s after its last compile; the closing line follows */
  const char *want = "tpuc: compiled 3 XLA programs in ";
  for (int i = 0; i < 100 && !strstr(logged(), want); i++) sleep_ms(100);
  const char *log = logged();
  CHECK(strstr(log, "tpuc: compiling XLA programs: ") != NULL);
  CHECK(strstr(log, want) != NULL);
  CHECK(strstr(log, "the disk cache is off") != NULL); /* this runtime has none */
  /* a second burst counts from zero */
  compile_some(rt, 10, 2);
  for (int i = 0; i < 100 && !strstr(logged(), "compiled 2 XLA programs"); i++)
    sleep_ms(100);
  CHECK(strstr(logged(), "tpuc: compiled 2 XLA programs in ") != NULL);
  done(rt);
}

static void test_destroyed_inside_a_burst_closes_its_line(void) {
  capture();
  tpuc_runtime *rt = open_rt("0", NULL);
  if (!rt) {
    restore();
    return;
  }
  compile_some(rt, 20, 1);
  for (int i = 0; i < 50 && !strstr(logged(), "compiling XLA programs"); i++)
    sleep_ms(20);
  tpuc_runtime_destroy(rt);
  CHECK(strstr(logged(), "tpuc: compiled 1 XLA programs in ") != NULL);
  restore();
  unlink(g_log);
}

static void test_quiet_when_off_short_or_not_rank_0(void) {
  const char *settings[][2] = {{"off", NULL}, {NULL, NULL}, {"0", "3"}};
  for (int c = 0; c < 3; c++) {
    capture();
    tpuc_runtime *rt = open_rt(settings[c][0], settings[c][1]);
    if (!rt) {
    restore();
    return;
  }
    compile_some(rt, 30 + 10 * c, 2); /* well under the default 10 s */
    sleep_ms(300);
    tpuc_runtime_destroy(rt);
    CHECK(strstr(logged(), "tpuc:") == NULL);
    restore();
    unlink(g_log);
  }
  unsetenv("TPUC_COMPILE_PROGRESS");
  unsetenv("RANK");
}

int main(void) {
  if (!harness_plugin_set()) return 1;
  RUN(test_burst_prints_progress_then_a_closing_line);
  RUN(test_destroyed_inside_a_burst_closes_its_line);
  RUN(test_quiet_when_off_short_or_not_rank_0);
  return harness_end();
}
