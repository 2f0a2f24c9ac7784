/*
 * llamarig's memory shim for rpc-servers on one machine (llamarig.testing.rpc): an LD_PRELOAD
 * library that makes ggml-rpc-server's CPU device report $LLAMARIG_RPC_MEMORY_MIB MiB.
 *
 * The CPU device's memory is sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGE_SIZE), with free equal
 * to total (ggml/src/ggml-cpu/ggml-cpu.cpp:365-381 at llama.cpp build 11434), and an rpc-server
 * hands exactly that to llama-server (RPC_CMD_GET_DEVICE_MEMORY, ggml/src/ggml-rpc/ggml-rpc.cpp:
 * 1802-1814); the pinned rpc-server has no option for it (tools/rpc/rpc-server.cpp:118-158).
 * Only _SC_PHYS_PAGES changes, and only while the variable is set: every other sysconf query
 * (the page size, the CPU count) goes to the C library.
 *
 * Built by llamarig.testing.rpc with: gcc -shared -fPIC -O2 -o memshim.so memshim.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

long sysconf(int name) {
    static long (*real_sysconf)(int);
    if (real_sysconf == NULL) {
        real_sysconf = (long (*)(int)) dlsym(RTLD_NEXT, "sysconf");
    }
    if (name == _SC_PHYS_PAGES) {
        const char * mib = getenv("LLAMARIG_RPC_MEMORY_MIB");
        if (mib != NULL && *mib != '\0') {
            const unsigned long long bytes = strtoull(mib, NULL, 10) * 1048576ULL;
            return (long) (bytes / (unsigned long long) real_sysconf(_SC_PAGE_SIZE));
        }
    }
    return real_sysconf(name);
}
