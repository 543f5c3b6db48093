from llmlab.cli import main

raise SystemExit(main())
