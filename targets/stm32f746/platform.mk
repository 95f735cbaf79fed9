# Board firmware for stm32f746 (32F746GDISCOVERY): included by the generated project's Makefile.
# Paths are relative to the project root; these files live in src/platform/stm32f746/.
#
#   FW_CC       cross compiler (Debian: gcc-arm-none-eabi + libnewlib-arm-none-eabi)
#   FW_ARCH     machine flags, needed when compiling and when linking (they pick the multilib)
#   FW_CFLAGS   compile flags (the project Makefile adds -Iinclude)
#   FW_LDFLAGS  link flags: our linker script, no crt0 (startup_stm32f746.c is the entry),
#               newlib for memcpy/memset and libgcc, nosys stubs
#   FW_SRCS     the platform's C sources
FW_CC      ?= arm-none-eabi-gcc
FW_OBJCOPY ?= arm-none-eabi-objcopy
FW_SIZE    ?= arm-none-eabi-size
FW_ARCH    := -mcpu=cortex-m7 -mthumb -mfloat-abi=hard -mfpu=fpv5-sp-d16
FW_CFLAGS  := $(FW_ARCH) -O2 -g -std=c99 -Wall -Wextra -ffp-contract=off \
              -ffunction-sections -fdata-sections
FW_LDFLAGS := $(FW_ARCH) -T src/platform/stm32f746/stm32f746.ld -nostartfiles \
              --specs=nosys.specs -Wl,--gc-sections
FW_SRCS    := src/platform/stm32f746/startup_stm32f746.c src/platform/stm32f746/reset_cortex_m7.c \
              src/platform/stm32f746/platform_stm32.c
