/* objc_msgSend for the double on aarch64 (AAPCS64, as Linux and Apple silicon use it for
 * fixed arguments): nil answers 0 in x0/x1 and v0-v3; otherwise save every argument register
 * (x0-x7, x8 for an indirect result, q0-q7), ask double_lookup(self, _cmd) for the IMP,
 * restore them and branch to it with the caller's stack untouched, so arguments passed on
 * the stack (the request constructor's ninth) arrive intact. */
    .text
    .globl objc_msgSend
    .type objc_msgSend, %function
    .p2align 2
objc_msgSend:
    cbz x0, 1f
    stp x29, x30, [sp, #-224]!
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
    bl double_lookup
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
    br x16
1:
    mov x1, #0
    movi v0.2d, #0
    movi v1.2d, #0
    movi v2.2d, #0
    movi v3.2d, #0
    ret
    .size objc_msgSend, .-objc_msgSend
    .section .note.GNU-stack,"",%progbits
