"""The rows of a 2-D float32 .npy (generate --logits), standard library only."""
import struct


def rows(path):
    b = open(path, 'rb').read()
    n = struct.unpack('<H', b[8:10])[0]
    head = b[10:10 + n].decode()
    shape = eval(head[head.index("'shape'") + 8:].split(')')[0].strip(' :(') + ',')
    count, cols = int(shape[0]), int(shape[1])
    vals = struct.unpack('<%df' % (count * cols), b[10 + n:10 + n + 4 * count * cols])
    return [vals[i * cols:(i + 1) * cols] for i in range(count)]
