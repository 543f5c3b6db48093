"""What the memory tests share: the activations of an estimate, its blocks' and its head's."""


def activations(estimate):
    return estimate.items["block activations"] + estimate.items["head activations"]
