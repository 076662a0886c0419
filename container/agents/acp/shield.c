/* Loaded into every ACP agent process (LD_PRELOAD, sandstream.container.agents.acp.shield):
 * before the program's own code runs, the process makes itself non-dumpable, so that a
 * process of the same uid without CAP_SYS_PTRACE (a tool it runs, a daemon a setup
 * script left) can neither ptrace it nor open its /proc/<pid>/{fd/*,mem,environ}. The
 * kernel resets the flag at every execve; the variable, inherited, sets it again in
 * each program the agent starts. A process that cannot be hidden does not run. */
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

__attribute__((constructor)) static void sandstream_hide_from_tools(void) {
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
        fputs("sandstream shield: cannot make this process non-dumpable\n", stderr);
        _exit(126);
    }
}
