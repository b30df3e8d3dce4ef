/* objc_msgSend for the double on x86-64 (System V): nil answers 0; otherwise save every
 * argument register (rdi..r9, rax for varargs, xmm0-7), ask double_lookup(self, _cmd) for the
 * IMP, restore them and jump to it with the caller's stack untouched, so messages with
 * arguments on the stack (the request constructor has nine) arrive intact. */
    .text
    .globl objc_msgSend
    .type objc_msgSend, @function
objc_msgSend:
    testq %rdi, %rdi
    jz 1f
    pushq %rbp
    movq %rsp, %rbp
    subq $192, %rsp
    movq %rdi, 0(%rsp)
    movq %rsi, 8(%rsp)
    movq %rdx, 16(%rsp)
    movq %rcx, 24(%rsp)
    movq %r8, 32(%rsp)
    movq %r9, 40(%rsp)
    movq %rax, 48(%rsp)
    movdqu %xmm0, 64(%rsp)
    movdqu %xmm1, 80(%rsp)
    movdqu %xmm2, 96(%rsp)
    movdqu %xmm3, 112(%rsp)
    movdqu %xmm4, 128(%rsp)
    movdqu %xmm5, 144(%rsp)
    movdqu %xmm6, 160(%rsp)
    movdqu %xmm7, 176(%rsp)
    call double_lookup
    movq %rax, %r11
    movq 0(%rsp), %rdi
    movq 8(%rsp), %rsi
    movq 16(%rsp), %rdx
    movq 24(%rsp), %rcx
    movq 32(%rsp), %r8
    movq 40(%rsp), %r9
    movq 48(%rsp), %rax
    movdqu 64(%rsp), %xmm0
    movdqu 80(%rsp), %xmm1
    movdqu 96(%rsp), %xmm2
    movdqu 112(%rsp), %xmm3
    movdqu 128(%rsp), %xmm4
    movdqu 144(%rsp), %xmm5
    movdqu 160(%rsp), %xmm6
    movdqu 176(%rsp), %xmm7
    leave
    jmp *%r11
1:
    xorl %eax, %eax
    xorl %edx, %edx
    pxor %xmm0, %xmm0
    ret
    .size objc_msgSend, .-objc_msgSend
    .section .note.GNU-stack,"",@progbits
