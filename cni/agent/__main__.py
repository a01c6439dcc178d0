# SPDX-License-Identifier: Apache-2.0
import sys

from cni.agent.cli import main

sys.exit(main())
