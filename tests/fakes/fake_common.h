/* Shared helpers for the fake NVIDIA libraries: env knobs, a cross-process
 * attempt counter, a hang that only SIGKILL ends, and P2P pair knobs.
 * The knobs are documented in tests/fakes/node.py. */
#ifndef FAKE_COMMON_H
#define FAKE_COMMON_H

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

static inline int fake_env_int(const char *name, int fallback)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0')
        return fallback;
    return atoi(v);
}

static inline const char *fake_env_str(const char *name, const char *fallback)
{
    const char *v = getenv(name);
    return (v == NULL || *v == '\0') ? fallback : v;
}

/* Visible devices: CUDA_VISIBLE_DEVICES limits what the CUDA APIs (not NVML) see. */
static inline int fake_visible(int count)
{
    const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
    int n = 0;
    if (cvd == NULL)
        return count;
    for (const char *p = cvd; *p; p++) {
        if (p == cvd || p[-1] == ',')
            if (*p != ',')
                n++;
    }
    if (strcmp(cvd, "-1") == 0 || strcmp(cvd, "NoDevFiles") == 0)
        n = 0;
    return n < count ? n : count;
}

/* Attempt number (1-based) of `counter`, shared by every process through a
 * locked file in $FAKE_STATE_DIR; per process without it. */
static inline int fake_next_attempt(const char *counter)
{
    static int local;
    const char *dir = getenv("FAKE_STATE_DIR");
    char path[4096];
    char buf[32] = {0};
    int fd, n;
    if (dir == NULL || *dir == '\0')
        return ++local;
    snprintf(path, sizeof path, "%s/%s.count", dir, counter);
    fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0)
        return ++local;
    flock(fd, LOCK_EX);
    n = (int)read(fd, buf, sizeof buf - 1);
    n = (n > 0 ? atoi(buf) : 0) + 1;
    lseek(fd, 0, SEEK_SET);
    if (ftruncate(fd, 0) == 0) {
        int len = snprintf(buf, sizeof buf, "%d\n", n);
        if (write(fd, buf, (size_t)len) < 0) {
            /* the count is best effort */
        }
    }
    flock(fd, LOCK_UN);
    close(fd);
    return n;
}

/* Hang forever like a wedged driver call: ignore SIGTERM/SIGINT, record our pid
 * (and a forked helper's, with FAKE_HANG_FORK=1) so tests can check nothing is left. */
static inline void fake_hang(const char *what)
{
    const char *dir = getenv("FAKE_STATE_DIR");
    sigset_t set;
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    if (fake_env_int("FAKE_HANG_FORK", 0))
        fork(); /* both parent and child hang, in the same process group */
    if (dir != NULL && *dir != '\0') {
        char path[4096];
        FILE *fh;
        snprintf(path, sizeof path, "%s/hang-%s-%d.pid", dir, what, (int)getpid());
        fh = fopen(path, "w");
        if (fh != NULL) {
            fprintf(fh, "%d\n", (int)getpid());
            fclose(fh);
        }
    }
    sigemptyset(&set);
    for (;;)
        sigsuspend(&set);
}

/* The status word of pair (a, b) in a knob like "0-1:not_supported,2-3:corrupt"
 * (unordered pairs); returns NULL when the pair is not listed. */
static inline const char *fake_pair_status(const char *knob, int a, int b, char *out, size_t outlen)
{
    const char *spec = getenv(knob);
    const char *p = spec;
    if (spec == NULL)
        return NULL;
    while (p && *p) {
        int x = -1, y = -1;
        char word[64] = {0};
        if (sscanf(p, "%d-%d:%63[^,]", &x, &y, word) == 3) {
            if ((x == a && y == b) || (x == b && y == a)) {
                snprintf(out, outlen, "%s", word);
                return out;
            }
        }
        p = strchr(p, ',');
        if (p)
            p++;
    }
    return NULL;
}

#endif
