# Package marker for the host (picoring.firmware). Not copied onto boards:
# `picoring flash` copies the files listed in deploy.FIRMWARE_FILES.
