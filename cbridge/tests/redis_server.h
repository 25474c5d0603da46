/*
 * What the tests against a real redis-server share (test_remote, test_remote_lease): the server
 * started on a Unix socket in the test's own temporary folder (no TCP port, nothing saved) and
 * killed when the test ends (PR_SET_PDEATHSIG if the test dies); and the hosts, each a new
 * process of the test with a cache folder of its own, whose output the parent reads. static
 * inline: a test that uses only some of them stays -Wall clean.
 */
#ifndef JB_TEST_REDIS_SERVER_H
#define JB_TEST_REDIS_SERVER_H

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static inline void sleep_ms(int ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;
}

/* A socket connected to the Unix socket at `path`, or -1. */
static inline int connect_to(const char *path)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (!path || strlen(path) >= sizeof addr.sun_path)
        return -1;
    memcpy(addr.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Whether a connection to the Unix socket at `path` is accepted. */
static inline bool socket_answers(const char *path)
{
    int fd = connect_to(path);
    if (fd >= 0)
        close(fd);
    return fd >= 0;
}

/* Starts redis-server listening on the Unix socket `socket_path` only, its log (redis.log) and
 * files in `folder`, and waits until it answers (10 s at most): its pid, or 0 when it did not
 * start (not installed: its log says). */
static inline pid_t redis_server_start(const char *folder, const char *socket_path)
{
    unlink(socket_path); /* a server started again after one that was killed */
    char log[PATH_MAX + 16];
    snprintf(log, sizeof log, "%s/redis.log", folder);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives a test that crashed */
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execlp("redis-server", "redis-server", "--port", "0", "--unixsocket", socket_path,
               "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir", folder,
               (char *)NULL);
        _exit(127);
    }
    if (pid < 0)
        return 0;
    for (int i = 0; i < 1000; i++) {
        if (socket_answers(socket_path))
            return pid;
        if (waitpid(pid, NULL, WNOHANG) == pid)
            return 0;
        sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return 0;
}

/* Kills the server `*pid` (0: none), reaps it and sets `*pid` to 0. */
static inline void redis_server_stop(pid_t *pid)
{
    if (*pid > 0) {
        kill(*pid, SIGKILL);
        waitpid(*pid, NULL, 0);
        *pid = 0;
    }
}

static inline int remove_one_path(const char *path, const struct stat *st, int flag,
                                  struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* Removes the test's folder and everything in it (no link followed). */
static inline void remove_tree(const char *folder)
{
    if (folder[0])
        nftw(folder, remove_one_path, 16, FTW_DEPTH | FTW_PHYS);
}

/* In a host's child, before it runs the test in child mode: its own cache folder `cache` (the
 * disk cache on whatever the test's environment says: valgrind's run turns it off), the tier
 * `url` and its key file `key_file` (NULL: unset). */
static inline void host_environment(const char *cache, const char *url, const char *key_file)
{
    setenv("JITBRIDGE_CACHE_DIR", cache, 1);
    unsetenv("JITBRIDGE_DISK_CACHE");
    if (url)
        setenv("JITBRIDGE_REMOTE_CACHE", url, 1);
    else
        unsetenv("JITBRIDGE_REMOTE_CACHE");
    if (key_file)
        setenv("JITBRIDGE_REMOTE_KEY_FILE", key_file, 1);
    else
        unsetenv("JITBRIDGE_REMOTE_KEY_FILE");
}

/* Reads a host's output from `fd` (-1: none) until it ends or `text` (of `len`) is full, and
 * closes it: the text, NUL-ended. */
static inline void read_host_output(int fd, char *text, size_t len)
{
    size_t got = 0;
    ssize_t r;
    while (fd >= 0 && got + 1 < len && (r = read(fd, text + got, len - 1 - got)) > 0)
        got += (size_t)r;
    text[got] = '\0';
    if (fd >= 0)
        close(fd);
}

#endif
