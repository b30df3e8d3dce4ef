# Cross-compiling for Linux aarch64 (the aarch64 row, scripts/test_aarch64.sh) with Debian's
# gcc-aarch64-linux-gnu against its arm64 multiarch libraries; ctest runs what it builds
# under qemu-user. Apple silicon Macs are aarch64 too: this row runs the CPU code they run.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_ASM_COMPILER aarch64-linux-gnu-gcc)
# Debian installs arm64 libraries and headers beside the host's (multiarch): the compiler
# finds /usr/lib/aarch64-linux-gnu itself; pkg-config must read only the arm64 .pc files.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# qemu-aarch64 finds the arm64 loader and libraries at their multiarch paths under /.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
