/*
 * One exported trampoline per public name of the Go core (see shim.c for why).
 *
 *   NAME: slot = goiwarp_loader_table[i]
 *         if slot != NULL: tail-jump to slot       (every call after the first)
 *         else: save all argument registers, slot = goiwarp_loader_resolve(i),
 *               restore them, tail-jump to slot    (loads the core once)
 *
 * Nothing of the caller's frame is touched: stack arguments, the return address
 * and struct-return pointers reach the core as the caller laid them out.
 * The name list comes from the generated goiwarp_symbols.h (GIW_SYM(i, name, kind)).
 */
#include "goiwarp_symbols.h"

#if defined(__x86_64__)

	.text

/* r11 is scratch in the SysV ABI and carries no argument; r10 neither
 * (static chain, unused by C). Arguments: rdi rsi rdx rcx r8 r9, rax (number of
 * vector registers of a varargs call), xmm0-7; all saved below. */
.macro GIW_TRAMPOLINE name, idx
	.globl \name
	.type \name, @function
	.p2align 4
\name:
	.cfi_startproc
	endbr64
	movq goiwarp_loader_table+8*\idx(%rip), %r11
	testq %r11, %r11
	jz 1f
	jmp *%r11
1:	movl $\idx, %r11d
	jmp goiwarp_loader_slow
	.cfi_endproc
	.size \name, .-\name
.endm

	.p2align 4
	.type goiwarp_loader_slow, @function
goiwarp_loader_slow:
	.cfi_startproc
	/* entry: rsp = 8 mod 16 (the caller's call pushed the return address) */
	pushq %rbp
	.cfi_def_cfa_offset 16
	.cfi_offset %rbp, -16
	movq %rsp, %rbp
	.cfi_def_cfa_register %rbp
	subq $192, %rsp                 /* rsp = 0 mod 16 */
	movq %rdi, 0(%rsp)
	movq %rsi, 8(%rsp)
	movq %rdx, 16(%rsp)
	movq %rcx, 24(%rsp)
	movq %r8, 32(%rsp)
	movq %r9, 40(%rsp)
	movq %rax, 48(%rsp)
	movdqa %xmm0, 64(%rsp)
	movdqa %xmm1, 80(%rsp)
	movdqa %xmm2, 96(%rsp)
	movdqa %xmm3, 112(%rsp)
	movdqa %xmm4, 128(%rsp)
	movdqa %xmm5, 144(%rsp)
	movdqa %xmm6, 160(%rsp)
	movdqa %xmm7, 176(%rsp)
	movl %r11d, %edi
	call goiwarp_loader_resolve     /* hidden: a direct call, no PLT */
	movq %rax, %r11
	movq 0(%rsp), %rdi
	movq 8(%rsp), %rsi
	movq 16(%rsp), %rdx
	movq 24(%rsp), %rcx
	movq 32(%rsp), %r8
	movq 40(%rsp), %r9
	movq 48(%rsp), %rax
	movdqa 64(%rsp), %xmm0
	movdqa 80(%rsp), %xmm1
	movdqa 96(%rsp), %xmm2
	movdqa 112(%rsp), %xmm3
	movdqa 128(%rsp), %xmm4
	movdqa 144(%rsp), %xmm5
	movdqa 160(%rsp), %xmm6
	movdqa 176(%rsp), %xmm7
	leave
	.cfi_def_cfa %rsp, 8
	jmp *%r11
	.cfi_endproc
	.size goiwarp_loader_slow, .-goiwarp_loader_slow

#define GIW_SYM(i, name, kind) GIW_TRAMPOLINE name, i
#include "goiwarp_symbols.h"
#undef GIW_SYM

	.section .note.GNU-stack, "", @progbits

#elif defined(__aarch64__)

	.text

/* x16/x17 (IP0/IP1) are the intra-procedure-call scratch registers, free at a
 * call boundary. Arguments: x0-x7, x8 (indirect result), q0-q7; plus lr (x30),
 * which the call to the resolver clobbers. The slot is read with ldar: it pairs
 * with the resolver's release store, so a thread that sees the slot sees the
 * loaded, initialised core. `hint #34` is BTI C (a NOP without BTI). */
.macro GIW_TRAMPOLINE name, idx
	.globl \name
	.type \name, %function
	.p2align 4
\name:
	.cfi_startproc
	hint #34
	adrp x16, goiwarp_loader_table + 8*\idx
	add x16, x16, :lo12:goiwarp_loader_table + 8*\idx
	ldar x16, [x16]
	cbz x16, 1f
	br x16
1:	mov x17, #\idx
	b goiwarp_loader_slow
	.cfi_endproc
	.size \name, .-\name
.endm

	.p2align 4
	.type goiwarp_loader_slow, %function
goiwarp_loader_slow:
	.cfi_startproc
	stp x29, x30, [sp, #-224]!      /* sp stays 16-byte aligned */
	.cfi_def_cfa_offset 224
	.cfi_offset x29, -224
	.cfi_offset x30, -216
	mov x29, sp
	stp x0, x1, [sp, #16]
	stp x2, x3, [sp, #32]
	stp x4, x5, [sp, #48]
	stp x6, x7, [sp, #64]
	str x8, [sp, #80]
	stp q0, q1, [sp, #96]
	stp q2, q3, [sp, #128]
	stp q4, q5, [sp, #160]
	stp q6, q7, [sp, #192]
	mov w0, w17
	bl goiwarp_loader_resolve       /* hidden: a direct call, no PLT */
	mov x16, x0
	ldp x0, x1, [sp, #16]
	ldp x2, x3, [sp, #32]
	ldp x4, x5, [sp, #48]
	ldp x6, x7, [sp, #64]
	ldr x8, [sp, #80]
	ldp q0, q1, [sp, #96]
	ldp q2, q3, [sp, #128]
	ldp q4, q5, [sp, #160]
	ldp q6, q7, [sp, #192]
	ldp x29, x30, [sp], #224
	.cfi_def_cfa_offset 0
	.cfi_restore x29
	.cfi_restore x30
	br x16
	.cfi_endproc
	.size goiwarp_loader_slow, .-goiwarp_loader_slow

#define GIW_SYM(i, name, kind) GIW_TRAMPOLINE name, i
#include "goiwarp_symbols.h"
#undef GIW_SYM

	.section .note.GNU-stack, "", %progbits

#else
#error "libgoiwarp loader shim: no trampolines for this architecture (x86_64 and aarch64 only)"
#endif
