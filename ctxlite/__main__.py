from ctxlite.cli import main

main()
