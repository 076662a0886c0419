/* Loaded into every agent process (LD_PRELOAD, sandstream.container.agents.acp.shield).
 * Before the program's own code runs:
 *
 * 1. The process makes itself non-dumpable, so that a process of the same uid without
 *    CAP_SYS_PTRACE (a tool it runs, a daemon a setup script left) can neither ptrace it
 *    nor open its /proc/<pid>/{fd/N,mem,environ}. The kernel resets the flag at every
 *    execve; the variable, inherited, sets it again in each program the agent starts.
 *
 * 2. The first process loaded with it (the agent) installs a seccomp filter that every
 *    process it starts inherits, whatever it is (statically linked or not, LD_PRELOAD
 *    removed or not) and cannot remove, and forks a supervisor that answers, through the
 *    filter's notifications, each call that could signal or re-prioritise another
 *    process: kill, tkill, tgkill, rt_(tg)sigqueueinfo, pidfd_send_signal, prlimit64,
 *    setpriority, ioprio_set, sched_set*, setpgid into a group, F_SETOWN(_EX),
 *    FIOSETOWN/SIOCSPGRP, PTRACE_TRACEME. The agent's own calls pass as asked. Any
 *    other caller is refused (EPERM) when the call would reach a guarded process — the
 *    agent, the supervisor, or a process whose parent is the agent (its adapter's CLI,
 *    the shell a tool runs in), the caller itself excepted — by pid, thread, process
 *    group, kill(-1), a pidfd or a file owner; everything else passes, so tools still
 *    signal one another. Inherited processes loaded with the library find the filter in
 *    place (a second listener is refused with EBUSY) and only do step 1.
 *
 * A process that cannot be hidden or guarded does not run. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/ioprio.h>
#include <linux/seccomp.h>
#include <linux/sockios.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define SHIELD_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SHIELD_ARCH AUDIT_ARCH_AARCH64
#else
#error "the agents' shield knows x86_64 and aarch64"
#endif

#define ARG_LO(n) (offsetof(struct seccomp_data, args[n]))
#define LOAD(field) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (field))
#define RET(value) BPF_STMT(BPF_RET | BPF_K, (value))
#define IF_EQ(value, yes, no) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (value), (yes), (no))

#define NOTIFY SECCOMP_RET_USER_NOTIF
#define ALLOW SECCOMP_RET_ALLOW

static void refuse_to_run(const char *what) {
    fprintf(stderr, "sandstream shield: %s: %s\n", what, strerror(errno));
    _exit(126);
}

/* ---- the filter ------------------------------------------------------------------ */

static struct sock_filter program[] = {
    LOAD(offsetof(struct seccomp_data, arch)),
    IF_EQ(SHIELD_ARCH, 1, 0),
    RET(SECCOMP_RET_ERRNO | ENOSYS), /* a foreign ABI would dodge the numbers below */
    LOAD(offsetof(struct seccomp_data, nr)),
#if defined(__x86_64__)
    BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1), /* x32 */
    RET(SECCOMP_RET_ERRNO | ENOSYS),
#endif
    /* always asked */
    IF_EQ(SYS_kill, 13, 0),
    IF_EQ(SYS_tkill, 12, 0),
    IF_EQ(SYS_tgkill, 11, 0),
    IF_EQ(SYS_rt_sigqueueinfo, 10, 0),
    IF_EQ(SYS_rt_tgsigqueueinfo, 9, 0),
    IF_EQ(SYS_pidfd_send_signal, 8, 0),
    IF_EQ(SYS_setpriority, 7, 0),
    IF_EQ(SYS_ioprio_set, 6, 0),
    /* asked unless about the caller itself (first argument 0) */
    IF_EQ(SYS_prlimit64, 6, 0),
    IF_EQ(SYS_sched_setaffinity, 5, 0),
    IF_EQ(SYS_sched_setscheduler, 4, 0),
    IF_EQ(SYS_sched_setparam, 3, 0),
    IF_EQ(SYS_sched_setattr, 2, 0),
    BPF_JUMP(BPF_JMP | BPF_JA, 5, 0, 0),
    RET(NOTIFY),
    LOAD(ARG_LO(0)),
    IF_EQ(0, 0, 1),
    RET(ALLOW),
    RET(NOTIFY),
    /* setpgid into a group that exists (second argument not 0) */
    IF_EQ(SYS_setpgid, 0, 4),
    LOAD(ARG_LO(1)),
    IF_EQ(0, 0, 1),
    RET(ALLOW),
    RET(NOTIFY),
    /* ptrace(PTRACE_TRACEME): the parent would become the caller's tracer */
    IF_EQ(SYS_ptrace, 0, 4),
    LOAD(ARG_LO(0)),
    IF_EQ(PTRACE_TRACEME, 0, 1),
    RET(NOTIFY),
    RET(ALLOW),
    /* who gets a descriptor's SIGIO and SIGURG */
    IF_EQ(SYS_fcntl, 0, 5),
    LOAD(ARG_LO(1)),
    IF_EQ(F_SETOWN, 1, 0),
    IF_EQ(F_SETOWN_EX, 0, 1),
    RET(NOTIFY),
    RET(ALLOW),
    IF_EQ(SYS_ioctl, 0, 5),
    LOAD(ARG_LO(1)),
    IF_EQ(FIOSETOWN, 1, 0),
    IF_EQ(SIOCSPGRP, 0, 1),
    RET(NOTIFY),
    RET(ALLOW),
    /* one listener per agent (the kernel, too, allows one per filter chain) */
    IF_EQ(SYS_seccomp, 0, 5),
    LOAD(ARG_LO(0)),
    IF_EQ(SECCOMP_SET_MODE_FILTER, 0, 3),
    LOAD(ARG_LO(1)),
    BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, SECCOMP_FILTER_FLAG_NEW_LISTENER, 0, 1),
    RET(SECCOMP_RET_ERRNO | EBUSY),
    RET(ALLOW),
};

/* ---- what the supervisor reads in /proc -------------------------------------------- */

static pid_t agent_pid;

/* A number field of /proc/<pid>/stat after the command name (0: the state), or -1. */
static long stat_field(pid_t pid, int index) {
    char path[64], buffer[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t size = read(fd, buffer, sizeof buffer - 1);
    close(fd);
    if (size <= 0)
        return -1;
    buffer[size] = '\0';
    char *cursor = strrchr(buffer, ')');
    if (cursor == NULL)
        return -1;
    cursor += 2; /* ") " */
    for (int field = 0; field < index; field++) {
        cursor = strchr(cursor, ' ');
        if (cursor == NULL)
            return -1;
        cursor++;
    }
    return strtol(cursor, NULL, 10);
}

static long parent_of(pid_t pid) { return stat_field(pid, 1); }
static long group_of(pid_t pid) { return stat_field(pid, 2); }

/* The thread group (process) a thread id belongs to, or -1 when there is none. */
static pid_t process_of(pid_t tid) {
    char path[64], buffer[4096];
    snprintf(path, sizeof path, "/proc/%d/status", (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t size = read(fd, buffer, sizeof buffer - 1);
    close(fd);
    if (size <= 0)
        return -1;
    buffer[size] = '\0';
    char *line = strstr(buffer, "\nTgid:");
    return line == NULL ? -1 : (pid_t)strtol(line + 6, NULL, 10);
}

/* Whether thread ``tid`` is of the agent, the supervisor, or a process the agent
 * started itself, other than ``caller``. */
static int guarded(pid_t tid, pid_t caller) {
    pid_t pid = process_of(tid);
    if (pid <= 0 || pid == caller)
        return 0;
    return pid == agent_pid || pid == getpid() || parent_of(pid) == agent_pid;
}

/* Whether process group ``group`` holds a guarded process other than ``caller``. */
static int group_guarded(long group, pid_t caller) {
    if (group <= 0)
        return 0;
    if (group_of(agent_pid) == group || group_of(getpid()) == group)
        return 1;
    DIR *proc = opendir("/proc");
    if (proc == NULL)
        return 1; /* cannot tell: refuse */
    int found = 0;
    struct dirent *entry;
    while (!found && (entry = readdir(proc)) != NULL) {
        char *end;
        long pid = strtol(entry->d_name, &end, 10);
        if (*end != '\0' || pid <= 0)
            continue;
        found = pid != caller && parent_of((pid_t)pid) == agent_pid &&
                group_of((pid_t)pid) == group;
    }
    closedir(proc);
    return found;
}

/* A signal target as kill(2) reads it: a process, the caller's group, every process. */
static int kill_reaches_guarded(pid_t caller, int target) {
    if (target > 0)
        return guarded(target, caller);
    if (target == 0)
        return group_guarded(group_of(caller), caller);
    if (target == -1)
        return 1;
    return group_guarded(-(long)target, caller);
}

/* setpriority(2) and ioprio_set(2): one process, a group, or every process of a user. */
static int priority_reaches_guarded(pid_t caller, int which, int who, int process,
                                    int group) {
    if (which == process)
        return who != 0 && guarded(who, caller);
    if (which == group)
        return group_guarded(who == 0 ? group_of(caller) : who, caller);
    return 1;
}

/* Whether the call must be refused; the caller is neither the agent nor the supervisor. */
static int refused(const struct seccomp_notif *request, pid_t caller) {
    const __u64 *args = request->data.args;
    int first = (int)args[0], second = (int)args[1], third = (int)args[2];
    switch (request->data.nr) {
    case SYS_kill:
    case SYS_rt_sigqueueinfo:
        return second != 0 && kill_reaches_guarded(caller, first);
    case SYS_tkill:
        return second != 0 && guarded(first, caller);
    case SYS_tgkill:
    case SYS_rt_tgsigqueueinfo:
        return third != 0 && (guarded(first, caller) || guarded(second, caller));
    case SYS_pidfd_send_signal:
        return second != 0; /* which process a descriptor names is not the caller's to say */
    case SYS_prlimit64:
        return args[2] != 0 && guarded(first, caller);
    case SYS_sched_setaffinity:
    case SYS_sched_setscheduler:
    case SYS_sched_setparam:
    case SYS_sched_setattr:
        return guarded(first, caller);
    case SYS_setpriority:
        return priority_reaches_guarded(caller, first, second, PRIO_PROCESS, PRIO_PGRP);
    case SYS_ioprio_set:
        return priority_reaches_guarded(caller, first, second, IOPRIO_WHO_PROCESS,
                                        IOPRIO_WHO_PGRP);
    case SYS_setpgid:
        return group_guarded(second, caller);
    case SYS_ptrace:
        return guarded((pid_t)parent_of(caller), caller);
    case SYS_fcntl:
        if ((int)args[1] == F_SETOWN_EX)
            return 1; /* its target is in the caller's memory */
        if (third > 0)
            return guarded(third, caller);
        return third < 0 && group_guarded(-(long)third, caller);
    default: /* FIOSETOWN, SIOCSPGRP: their target is in the caller's memory */
        return 1;
    }
}

static void supervise(int listener) {
    struct seccomp_notif_sizes sizes;
    if (syscall(SYS_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) != 0)
        _exit(126);
    struct seccomp_notif *request = calloc(1, sizes.seccomp_notif);
    struct seccomp_notif_resp *response = calloc(1, sizes.seccomp_notif_resp);
    if (request == NULL || response == NULL)
        _exit(126);
    for (;;) {
        memset(request, 0, sizes.seccomp_notif);
        if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, request) != 0) {
            if (errno == EINTR || errno == ENOENT)
                continue;
            _exit(0); /* every process under the filter is gone */
        }
        memset(response, 0, sizes.seccomp_notif_resp);
        response->id = request->id;
        pid_t caller = process_of((pid_t)request->pid);
        if (caller == agent_pid || caller == getpid() || !refused(request, caller))
            response->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
        else
            response->error = -EPERM;
        if (ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, response) != 0 && errno != ENOENT &&
            response->flags != 0) {
            /* a kernel that cannot let a call continue (< 5.5): refuse it, never leave
             * the caller waiting */
            response->flags = 0;
            response->error = -ENOSYS;
            ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, response);
        } /* ENOENT: the caller died meanwhile */
    }
}

/* Fork the supervisor; the agent keeps no copy of the listener. */
static void start_supervisor(int listener) {
    agent_pid = getpid();
    pid_t child = fork();
    if (child < 0)
        refuse_to_run("cannot start the agent's supervisor");
    if (child > 0) {
        close(listener);
        return;
    }
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0 || getppid() != agent_pid)
        _exit(0);
    int moved = dup3(listener, 3, O_CLOEXEC) == 3 || listener == 3;
    if (!moved)
        _exit(126);
    syscall(SYS_close_range, 4, ~0U, 0);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd <= 2; fd++)
        dup2(null, fd);
    if (null > 3)
        close(null);
    prctl(PR_SET_NAME, "agent-shield", 0, 0, 0);
    supervise(3);
}

__attribute__((constructor)) static void sandstream_hide_from_tools(void) {
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
        refuse_to_run("cannot make this process non-dumpable");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        refuse_to_run("cannot set no_new_privs");
    struct sock_fprog filter = {
        .len = (unsigned short)(sizeof program / sizeof program[0]),
        .filter = program,
    };
    long listener = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER,
                            SECCOMP_FILTER_FLAG_NEW_LISTENER, &filter);
    if (listener >= 0)
        start_supervisor((int)listener);
    else if (errno != EBUSY) /* EBUSY: a supervisor above already guards its agent */
        refuse_to_run("cannot guard this process from the programs it starts");
}
