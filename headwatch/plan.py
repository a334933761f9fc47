"""placeholder"""
def add_arguments(p):
    p.add_argument("source")
def run(args):
    return 0
