/* The benchmark's stand-in agent: records when it started, then exits at once.
 *
 * Compiled by bench/run.py at bench time; the orchestrator and every baseline
 * start this same binary, so the cost of starting it cancels out of the ratios.
 *
 *   agent [MEMO]       append "<CLOCK_REALTIME ns> <pid> <memo>\n" to $BENCH_RECORD with one
 *                      O_APPEND write (MEMO defaults to $ORCHESTRATOR_MEMO), then exit 0.
 *                      $BENCH_AGENT_IGNORE_TERM=1: ignore SIGTERM (set before the record is written).
 *                      $BENCH_AGENT_SLEEP=<seconds>: sleep that long after recording (for cancel).
 *   agent --stop PGID GRACE_MS
 *                      the cancel baseline: the kill ladder in C. SIGTERM to the process group,
 *                      poll every 1 ms until it is gone, SIGKILL once GRACE_MS have passed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void pause_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

static int group_gone(pid_t pgid) { return kill(-pgid, 0) == -1 && errno == ESRCH; }

static int stop_group(pid_t pgid, long grace_ms) {
    long long deadline = now_ns(CLOCK_MONOTONIC) + grace_ms * 1000000LL;
    if (kill(-pgid, SIGTERM) == -1 && errno == ESRCH) return 0;
    while (!group_gone(pgid)) {
        if (now_ns(CLOCK_MONOTONIC) >= deadline) {
            kill(-pgid, SIGKILL);
            while (!group_gone(pgid)) pause_ms(1);
            return 0;
        }
        pause_ms(1);
    }
    return 0;
}

int main(int argc, char **argv) {
    long long started = now_ns(CLOCK_REALTIME); /* the agent's first instruction */
    if (argc == 4 && strcmp(argv[1], "--stop") == 0) return stop_group((pid_t)atol(argv[2]), atol(argv[3]));

    const char *ignore = getenv("BENCH_AGENT_IGNORE_TERM");
    if (ignore && *ignore && strcmp(ignore, "0") != 0) signal(SIGTERM, SIG_IGN);

    const char *memo = argc > 1 ? argv[1] : getenv("ORCHESTRATOR_MEMO");
    const char *record = getenv("BENCH_RECORD");
    if (record && *record) {
        char line[4096];
        int n = snprintf(line, sizeof line, "%lld %d %s\n", started, (int)getpid(), memo ? memo : "-");
        if (n >= (int)sizeof line) { /* a path this long is truncated, but the line still ends */
            n = sizeof line - 1;
            line[n - 1] = '\n';
        }
        int fd = open(record, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0 || write(fd, line, (size_t)n) != n) {
            perror("bench agent: cannot append to $BENCH_RECORD");
            return 1;
        }
        close(fd);
    }

    const char *sleep_for = getenv("BENCH_AGENT_SLEEP");
    if (sleep_for && *sleep_for) {
        double seconds = atof(sleep_for);
        struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
        while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
        }
    }
    return 0;
}
