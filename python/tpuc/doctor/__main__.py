"""python -m tpuc.doctor [options] -- python train.py [args]"""
import sys

from . import main

sys.exit(main())
