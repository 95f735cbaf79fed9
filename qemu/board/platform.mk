# platform.mk - build settings for the QEMU mps2-an500 (Cortex-M7) platform.
#
# In a generated project this file is src/platform/qemu/platform.mk; the project Makefile
# includes it from the project root:   include src/platform/qemu/platform.mk
# and links  $(QEMU_SRCS) + the portable sources  with
#   $(QEMU_CC) $(QEMU_CFLAGS) ... -c         (compile)
#   $(QEMU_CC) $(QEMU_LDFLAGS) OBJS $(QEMU_LDLIBS) -o firmware.elf   (link)
# and runs the ELF with  $(QEMU_SYSTEM) $(QEMU_RUN_FLAGS) -kernel firmware.elf
# (the same command line as zocodegen.qemu.runner.qemu_command()).
#
# Libraries: newlib-nano (memcpy, memset, libm) and libgcc. There are no start files (the
# reset code is startup_mps2.c) and no syscall stubs: pulling in stdio, malloc or abort()
# fails to link on purpose.

QEMU_DIR       ?= src/platform/qemu
QEMU_CROSS     ?= arm-none-eabi-
QEMU_CC        ?= $(QEMU_CROSS)gcc
QEMU_SIZE      ?= $(QEMU_CROSS)size
QEMU_SYSTEM    ?= qemu-system-arm

QEMU_ARCH      := -mcpu=cortex-m7 -mthumb -mfloat-abi=hard -mfpu=fpv5-sp-d16
ifeq ($(SOFT_FLOAT),1)
# a core without an FPU: no FP instruction, soft-float libraries, the FPU left off at reset
QEMU_ARCH      := -mcpu=cortex-m7 -mthumb -mfloat-abi=soft
endif
QEMU_CFLAGS    := $(QEMU_ARCH) -O2 -g -std=c99 -Wall -Wextra -ffp-contract=off \
                  -ffunction-sections -fdata-sections -fno-common -Iinclude
QEMU_LDSCRIPT  := $(QEMU_DIR)/mps2_an500.ld
QEMU_LDFLAGS   := $(QEMU_ARCH) -T $(QEMU_LDSCRIPT) -nostartfiles --specs=nano.specs \
                  -Wl,--gc-sections
QEMU_LDLIBS    := -lm
QEMU_SRCS      := $(QEMU_DIR)/startup_mps2.c $(QEMU_DIR)/platform_mps2.c

# UART0 on stdio (binary-safe, no monitor, no mux), exit status via semihosting,
# instruction counting (platform_cycles() = instructions).
QEMU_RUN_FLAGS := -M mps2-an500 -cpu cortex-m7 -nodefaults -display none -monitor none \
                  -chardev stdio,id=zo_uart0,mux=off,signal=off -serial chardev:zo_uart0 \
                  -semihosting-config enable=on,target=native -icount shift=0
