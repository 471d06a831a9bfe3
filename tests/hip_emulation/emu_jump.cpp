/* The emulator's one jump between fiber stacks (emu_runtime.cpp): a file of
 * its own so that it is compiled without AddressSanitizer, and its callers
 * do not know it never returns. Otherwise ASan precedes the jump with
 * __asan_handle_no_return, a system call and a clean-up of the stack's
 * shadow on every switch (most of the emulated suite's time in a sanitizer
 * build), which the switch annotations in emu_runtime.cpp make unneeded. */

/* Continues at the __builtin_setjmp that filled env (never returns). */
void ug_emu_jump(void **env);

void ug_emu_jump(void **env) { __builtin_longjmp(env, 1); }
