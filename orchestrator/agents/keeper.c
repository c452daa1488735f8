/* The per-attempt keeper: starts one agent, waits for it, and leaves its exit status on disk.
 *
 *   orchestrator-keeper EXIT_PATH KILL_AFTER GRACE STATUS_FD [--log LOG_PATH HEADER] [--cwd DIR] [--fd N]...
 *                       PROGRAM [ARG...]
 *
 * --log: LOG_PATH is opened for appending (its folder made if needed), HEADER written to it, and it becomes the
 * agent's stdout and stderr; done here, that metadata write is off the orchestrator's loop. --cwd: the agent starts
 * in DIR, which posix_spawn (how the orchestrator starts the keeper) cannot enter. EXIT_PATH and LOG_PATH are absolute.
 * Every descriptor above 2 but STATUS_FD and each --fd N (which the agent inherits) is closed: what the
 * orchestrator's own parent left inheritable must not reach the agent or stay open in a keeper that outlives it.
 *
 * STATUS_FD says "P<pid>\n" once the agent is exec'd, or an errno before the keeper exits: "L<errno>\n" and 126
 * (the log), "C<errno>\n" and 126 (DIR), "E<errno>\n" and 127 (the exec). Its end of file means all is said.
 *
 * The agent leads a new session (its pid is its group, as without a keeper), with every KEEPER_X=v of the
 * environment as X=v: the orchestrator hands the ORCHESTRATOR_* variables over that way, so the keeper carries no
 * run id and no kill ladder mistakes it for part of the agent.
 *
 * The agent's end ("exit N\n" or "signal N\n", " timeout" appended when the keeper stopped it) goes to
 * EXIT_PATH.tmp, renamed to EXIT_PATH, for an orchestrator that died meanwhile to read at its restart. Past
 * KILL_AFTER seconds (0: never) the keeper stops the agent's group itself (SIGTERM, GRACE seconds, SIGKILL), so an
 * agent whose orchestrator never comes back does not run unbounded.
 *
 * SIGTERM, SIGINT, SIGHUP, SIGQUIT and SIGPIPE are blocked or ignored: only the agent's end or SIGKILL ends it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

extern char **environ;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void say(int fd, char kind, long value) {
    char buf[32];
    int len = snprintf(buf, sizeof buf, "%c%ld\n", kind, value);
    if (fd >= 0 && write(fd, buf, (size_t)len) < 0) {
        /* the orchestrator is gone: nobody to tell */
    }
}

/* mkdir of PATH's folder and of the folder above it, here and not in the orchestrator: it is off the
 * start's path, and a metadata write on a busy disk can wait milliseconds behind a journal commit */
static void make_parents(const char *path) {
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
        return;
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        return;
    *slash = '\0';
    if (mkdir(dir, 0700) == 0 || errno == EEXIST)
        return;
    char *up = strrchr(dir, '/');
    if (up != NULL) {
        *up = '\0';
        mkdir(dir, 0700);
        *up = '/';
    }
    mkdir(dir, 0700);
}

#if defined(__linux__) && !defined(SYS_close_range)
#define SYS_close_range 436 /* musl's headers lack it; Linux 5.9 gave it this number on every architecture */
#endif

static void close_from_to(unsigned lo, unsigned hi) {
#ifdef SYS_close_range
    if (syscall(SYS_close_range, lo, hi, 0) == 0)
        return;
#endif
    struct rlimit limit; /* no close_range (Linux before 5.9): each descriptor up to the limit */
    unsigned top = 65536;
    if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < top)
        top = (unsigned)limit.rlim_cur;
    for (unsigned fd = lo; fd <= hi && fd < top; fd++)
        close((int)fd);
}

/* close every descriptor above 2 but the KEEP_COUNT in KEEP (sorted here) */
static void close_others(int *keep, int keep_count) {
    for (int i = 1; i < keep_count; i++) /* a handful: insertion sort */
        for (int j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
            int t = keep[j];
            keep[j] = keep[j - 1];
            keep[j - 1] = t;
        }
    unsigned lo = 3;
    for (int i = 0; i < keep_count; i++) {
        if (keep[i] < (int)lo)
            continue;
        if ((unsigned)keep[i] > lo)
            close_from_to(lo, (unsigned)keep[i] - 1);
        lo = (unsigned)keep[i] + 1;
    }
    close_from_to(lo, ~0U);
}

static int record(const char *path, int status, int timed_out) {
    char tmp[4096], line[64];
    int len;
    make_parents(path);
    int exited = WIFEXITED(status);
    len = snprintf(line, sizeof line, "%s %d%s\n", exited ? "exit" : "signal",
                   exited ? WEXITSTATUS(status) : WTERMSIG(status), timed_out ? " timeout" : "");
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return -1;
    ssize_t wrote = write(fd, line, (size_t)len);
    close(fd);
    if (wrote != len || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *log_path = NULL, *header = NULL, *cwd = NULL;
    int keep[17], keep_count = 0;
    int at = 5;
    while (at < argc) {
        if (strcmp(argv[at], "--log") == 0 && at + 2 < argc) {
            log_path = argv[at + 1];
            header = argv[at + 2];
            at += 3;
        } else if (strcmp(argv[at], "--cwd") == 0 && at + 1 < argc) {
            cwd = argv[at + 1];
            at += 2;
        } else if (strcmp(argv[at], "--fd") == 0 && at + 1 < argc && keep_count < 16) {
            keep[keep_count++] = atoi(argv[at + 1]);
            at += 2;
        } else {
            break;
        }
    }
    if (argc < 6 || at >= argc) {
        fprintf(stderr,
                "usage: %s EXIT_PATH KILL_AFTER GRACE STATUS_FD [--log LOG_PATH HEADER] [--cwd DIR] [--fd N]... "
                "PROGRAM [ARG...]\n",
                argv[0]);
        return 125;
    }
    const char *exit_path = argv[1];
    double kill_after = atof(argv[2]);
    double grace = atof(argv[3]);
    int status_fd = atoi(argv[4]);
    char **command = argv + at;
    if (status_fd > 2)
        keep[keep_count++] = status_fd;
    close_others(keep, keep_count);

    /* the pointers are moved, not the strings: /proc/<keeper>/environ still shows KEEPER_X, never X */
    for (char **item = environ; *item != NULL; item++)
        if (strncmp(*item, "KEEPER_", 7) == 0)
            *item += 7;

    sigset_t watched, previous;
    sigemptyset(&watched);
    const int blocked[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof blocked / sizeof *blocked; i++)
        sigaddset(&watched, blocked[i]);
    sigprocmask(SIG_BLOCK, &watched, &previous);
    if (status_fd >= 0)
        fcntl(status_fd, F_SETFD, FD_CLOEXEC);

    /* a write to the status pipe of an orchestrator that just died must not kill the keeper */
    signal(SIGPIPE, SIG_IGN);
    if (log_path != NULL) {
        int log = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (log < 0 && errno == ENOENT) {
            make_parents(log_path);
            log = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        }
        if (log < 0) {
            say(status_fd, 'L', errno);
            return 126;
        }
        size_t length = strlen(header);
        if (length > 0 && write(log, header, length) < 0) {
            /* the header is a courtesy: the output still goes to the log */
        }
        dup2(log, 1);
        dup2(log, 2);
        close(log);
    }
    if (cwd != NULL && chdir(cwd) != 0) {
        say(status_fd, 'C', errno);
        return 126;
    }
    double started = now();
    /* posix_spawn (a vfork in glibc) returns once the agent is exec'd, in a session of its own with the
     * signal mask and SIGPIPE as they were: only then is the orchestrator woken by the status line, so
     * on a busy machine it does not take the CPU from an agent that is between its fork and its exec */
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigmask(&attr, &previous);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
#ifdef __linux__
    /* an agent's process that double-forks or calls setsid is handed to this keeper (not to init or the
     * orchestrator), so the orchestrator still traces it to its run when it asks for something */
    prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
#endif
    pid_t agent;
    int failed = posix_spawn(&agent, command[0], NULL, &attr, command, environ);
    posix_spawnattr_destroy(&attr);
    if (failed != 0) {
        say(status_fd, 'E', failed);
        return 127;
    }
    say(status_fd, 'P', (long)agent);
    if (status_fd >= 0)
        close(status_fd);
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) { /* the agent alone holds the prompt pipe: it must see its writer close */
        dup2(null, 0);
        close(null);
    }

    int stage = 0; /* 0: running, 1: SIGTERM sent, 2: SIGKILL sent */
    double next = kill_after > 0 ? started + kill_after : 0;
    int status = 0;
    for (;;) {
        pid_t done;
        int ended = 0, any;
        while ((done = waitpid(-1, &any, WNOHANG)) > 0) { /* what was handed to us is reaped too */
            if (done == agent) {
                status = any;
                ended = 1;
            }
        }
        if (ended)
            break;
        if (done < 0 && errno != EINTR)
            return 125;
        int got;
        if (next > 0 && stage < 2) {
            double left = next - now();
            if (left < 0)
                left = 0;
            struct timespec wait = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
            got = sigtimedwait(&watched, NULL, &wait);
        } else {
            got = sigwaitinfo(&watched, NULL);
        }
        if (got < 0 && errno == EAGAIN) {
            if (stage == 0) {
                kill(-agent, SIGTERM);
                stage = 1;
                next = now() + grace;
            } else {
                kill(-agent, SIGKILL);
                stage = 2;
            }
        }
    }
    record(exit_path, status, stage > 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
