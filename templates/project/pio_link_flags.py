"""PlatformIO extra script for the bare-metal (no framework) zocodegen firmware.

PlatformIO's ststm32 platform without a framework passes only -mcpu and -mthumb to the
linker, and SCons files -mfloat-abi/-mfpu from ``build_flags`` under compiler flags only, so
the link would pick the soft-float multilib of newlib/libgcc and fail against our hard-float
objects. This script forwards the machine flags of ``build_flags`` to the link and drops the
C runtime start files (the platform's startup file defines the entry point), matching
platform.mk. platformio.ini runs it as a ``post:`` script, after the platform's builder has
set up its own flags.
"""
Import("env")  # noqa: F821 -- provided by SCons when PlatformIO runs the script

MACHINE_PREFIXES = ("-mcpu=", "-mthumb", "-mfloat-abi=", "-mfpu=")


def machine_flags(build_flags):
    flags = []
    for item in build_flags:
        for flag in str(item).split():
            if flag.startswith(MACHINE_PREFIXES) and flag not in flags:
                flags.append(flag)
    return flags


_machine = machine_flags(env.GetProjectOption("build_flags", []))  # noqa: F821
env.Append(  # noqa: F821
    ASFLAGS=_machine,
    LINKFLAGS=_machine + ["-nostartfiles", "--specs=nosys.specs"],
)
