"""The emulated boards (issue 34, docs/emulated.md): the STM32F746 and STM32H7B3 firmware
ELFs a user flashes, run on a Cortex-M7 model with the boards' memory maps and register
models (machine.py, clocks.py), USART1 bridged to the host link."""
